-- renew.lua: extend one owner's hold.
-- KEYS[1] lock hash
-- ARGV[1] owner id, ARGV[2] TTL ms
-- Returns 1 when renewed, 0 when the hold has expired or was released, -1 when another owner holds the key.
local key, owner = KEYS[1], ARGV[1]
local got = redis.pcall('HMGET', key, owner .. ':t', owner .. ':x', owner, owner .. ':r')
if failed(got) then return wrong_type(key, 'a lock') end
local token, x = got[1], got[2]
if token and not x then
  -- The lone owner: its hold is the key's, alive since the key exists.
  if not got[3] and not got[4] then return 0 end -- released, kept for MinHold
  redis.call('PEXPIRE', key, ARGV[2])
  return 1
end
local now = now_ms()
if not token or tonumber(x) <= now then
  if redis.call('EXISTS', key) == 1 and sweep(key, now) > 0 then return -1 end
  return 0
end
-- Released and kept only for MinHold: a renewal still on the wire must not
-- extend it.
if not got[3] and not got[4] then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('HSET', key, owner .. ':x', now + ttl)
extend_key(key, ttl)
return 1
