-- renew.lua: extend one owner's hold.
-- KEYS[1] lock hash
-- ARGV[1] owner id, ARGV[2] TTL ms
-- Returns 1 when renewed, 0 when the hold has expired or was released, -1 when another owner holds the key.
local key, owner, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local got = redis.call('HMGET', key, owner .. ':x', owner, owner .. ':r')
local x = got[1]
if not x or tonumber(x) <= now then
  if redis.call('EXISTS', key) == 1 and sweep(key, now) > 0 then return -1 end
  return 0
end
-- Released and kept only for MinHold: a renewal still on the wire must not
-- extend it.
if not got[2] and not got[3] then return 0 end
redis.call('HSET', key, owner .. ':x', now + ttl)
extend_key(key, ttl)
return 1
