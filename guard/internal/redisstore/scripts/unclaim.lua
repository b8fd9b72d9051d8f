-- unclaim.lua: delete a claim if it still holds the caller's value (a
-- quorum's claimer taking back what it stored on a minority of masters).
-- KEYS[1] claim, ARGV[1] the value the caller stored
-- Returns 1 when it deleted the claim, 0 when the claim holds another
-- value or none.
local got = redis.pcall('GET', KEYS[1])
if failed(got) then return wrong_type(KEYS[1], 'a claim') end
if got == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
