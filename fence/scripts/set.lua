-- set: store a value under a key unless a higher fencing token wrote it.
--
-- KEYS[1]  the data key
-- KEYS[2]  the last token accepted for it (same hash slot)
-- ARGV[1]  the value
-- ARGV[2]  the writer's token (decimal, positive)
-- ARGV[3]  the value's TTL in milliseconds; 0: no expiry
--
-- Reply: {1, token} when stored; {0, newer} when refused, newer being the
-- stored token, higher than ARGV[2]. The token key is kept at least as long
-- as the value.

local stored = last(KEYS[2])
if type(stored) == 'table' then
  return stored -- an error reply
end
if stored and below(ARGV[2], stored) then
  return {0, stored}
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  keep(KEYS[2], ARGV[2], ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
  keep(KEYS[2], ARGV[2], -1)
end
return {1, ARGV[2]}
