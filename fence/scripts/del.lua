-- del: delete a key unless a higher fencing token wrote it.
--
-- KEYS[1]  the data key
-- KEYS[2]  the last token accepted for it (same hash slot)
-- ARGV[1]  the writer's token (decimal, positive)
--
-- Reply: {1, token} when deleted (also when there was nothing to delete);
-- {0, newer} when refused, newer being the stored token, higher than
-- ARGV[1]. The token stays as long as the value would have lived, for
-- good if it had no expiry, so a stale write after the delete is refused.

local stored = last(KEYS[2])
if type(stored) == 'table' then
  return stored -- an error reply
end
if stored and below(ARGV[1], stored) then
  return {0, stored}
end
local ttl = redis.call('PTTL', KEYS[1]) -- -2: no value, -1: no expiry
redis.call('DEL', KEYS[1])
if ttl == -2 and not stored then
  ttl = -1
end
keep(KEYS[2], ARGV[1], ttl)
return {1, ARGV[1]}
