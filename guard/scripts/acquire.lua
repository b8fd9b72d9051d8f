-- acquire.lua: a fresh hold, write or read.
-- KEYS[1] lock hash, KEYS[2] fencing counter (no TTL, same slot)
-- ARGV[1] owner id, ARGV[2] TTL ms, ARGV[3] 'w' or 'r', ARGV[4] MinHold ms
-- Returns {1, token} when acquired, {0, ms until the latest holder expires} when busy.
local key, owner, ttl, mode, minhold = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local kind = redis.call('TYPE', key)['ok']
local now = now_ms()
local owners, latest, writer = 0, 0, false
if kind == 'hash' then
  owners, latest, writer = sweep(key, now)
  -- A client retrying after a lost reply finds its own hold: report it.
  local mine = redis.call('HGET', key, owner .. ':t')
  if mine then return {1, tonumber(mine)} end
elseif kind ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a lock')
end
if owners > 0 and (mode == 'w' or writer) then
  return {0, latest - now}
end
local token = redis.pcall('INCR', KEYS[2])
if type(token) == 'table' and token.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a fencing counter (' .. token.err .. ')')
end
local fields = {owner .. ':x', now + ttl, owner .. ':t', token}
if mode == 'w' then
  table.insert(fields, 'writer'); table.insert(fields, owner)
  table.insert(fields, owner); table.insert(fields, 1)
else
  table.insert(fields, owner .. ':r'); table.insert(fields, 1)
end
if minhold > 0 then
  table.insert(fields, owner .. ':m'); table.insert(fields, now + minhold)
end
redis.call('HSET', key, unpack(fields))
if owners == 0 then
  redis.call('PEXPIRE', key, ttl)
else
  extend_key(key, ttl)
end
return {1, token}
