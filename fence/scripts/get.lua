-- get: read a key for a writer that will write it back (a read-modify-write),
-- recording the writer's token first unless a higher one wrote or read it.
--
-- KEYS[1]  the data key
-- KEYS[2]  the last token accepted for it (same hash slot)
-- ARGV[1]  the reader's token (decimal, positive)
--
-- Reply: {1, token, value} when read, value being false (a nil bulk) when
-- the key has none; {0, newer} when refused, newer being the stored token,
-- higher than ARGV[1]. The token is kept as del.lua keeps it: at least as
-- long as the value lives (for good if it has no expiry), never shortened;
-- for good when there is neither a value nor a recorded token yet.

local stored = last(KEYS[2])
if type(stored) == 'table' then
  return stored -- an error reply
end
if stored and below(ARGV[1], stored) then
  return {0, stored}
end
local value = redis.call('GET', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1]) -- -2: no value, -1: no expiry
if ttl == -2 and not stored then
  ttl = -1
end
keep(KEYS[2], ARGV[1], ttl)
return {1, ARGV[1], value}
