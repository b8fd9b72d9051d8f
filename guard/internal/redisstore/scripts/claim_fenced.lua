-- claim_fenced.lua: store a claim if the caller's fencing token is still the
-- newest the lock's counter has minted.
-- KEYS[1] fencing counter, KEYS[2] claim (a string, same slot)
-- ARGV[1] token (decimal digits, no leading zeros), ARGV[2] value, ARGV[3] TTL ms
-- Returns the counter: equal to ARGV[1] when the value was stored; another
-- token (a newer one, or one this token was not minted from) or 0 (no
-- counter) when nothing was stored.
-- The counter holds the latest token minted (by acquire.lua, or by a
-- release's grant in set_counts.lua), so a token equal to it belongs to the
-- newest hold. A missing counter proves nothing: it expired
-- (FenceTTL) or a failover lost it, and the hold that minted the newest token
-- may still exist. Nothing is stored then.
-- The common case first: the counter holds the caller's token digit for
-- digit, as it was minted. Anything else is read as counter_of reads it.
local counter = ARGV[1]
if redis.pcall('GET', KEYS[1]) ~= counter then
  local err
  counter, err = counter_of(KEYS[1])
  if counter == nil then return err end
  if not counter then return 0 end
  if counter ~= ARGV[1] then return tonumber(counter) end
end
-- SET with GET refuses, and leaves alone, a claim of another type: the
-- check and the write in one command.
if failed(redis.pcall('SET', KEYS[2], ARGV[2], 'PX', ARGV[3], 'GET')) then
  return wrong_type(KEYS[2], 'a claim')
end
return tonumber(counter)
