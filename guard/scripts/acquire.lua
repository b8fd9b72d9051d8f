-- acquire.lua: a fresh hold, write or read.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] waiting Lockers
-- (zset: Locker id -> registration expiry, server ms), KEYS[4] release channel
-- ARGV[1] owner id, ARGV[2] TTL ms, ARGV[3] 'w' or 'r', ARGV[4] MinHold ms,
-- ARGV[5] id of the Locker, to register when busy ('' for a caller that will
-- not wait), ARGV[6] registration ms, ARGV[7] 'PUBLISH' or 'SPUBLISH',
-- ARGV[8] FenceTTL ms: 0 makes the fencing counter permanent; otherwise a
-- counter that is not already permanent lives at least that long, and at
-- least the TTL, after this acquisition
-- Returns {1, token} when acquired, {0, ms until the latest holder expires} when busy.
-- A token is never below the server's clock in µs, so a counter that a
-- failover lost, or that expired, still cannot repeat a token already
-- handed out, as long as the servers' clocks agree within the failover.
-- When other Lockers wait for the key, publishes 'taken' for a write hold and
-- 'read' for a read hold (their readers may join it).
local key, owner, mode, locker = KEYS[1], ARGV[1], ARGV[3], ARGV[5]
local t = redis.call('TIME')
local now = ms_of(t)
local owners, latest, writer, lone = 0, 0, false, false
if redis.call('EXISTS', key) == 1 then
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a lock')
  end
  owners, latest, writer, lone = sweep(key, now)
  -- A client retrying after a lost reply finds its own hold: report it.
  local mine = redis.call('HGET', key, owner .. ':t')
  if mine then return {1, tonumber(mine)} end
end
if owners > 0 and (mode == 'w' or writer) then
  if locker ~= '' then
    local registration = tonumber(ARGV[6])
    redis.call('ZADD', KEYS[3], now + registration, locker)
    extend_key(KEYS[3], registration)
  end
  return {0, latest - now}
end
local last = redis.pcall('GET', KEYS[2])
if type(last) == 'table' and last.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a fencing counter (' .. last.err .. ')')
end
local counter = last and string.match(last, '^0*(%d+)$')
if last and not (counter and not greater(counter, '9007199254740991')) then
  -- Not a counter this script wrote: "inf", "1e300" or a number beyond what
  -- a double holds exactly would make the next token wrong.
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a fencing counter (holds ' .. string.sub(last, 1, 32) .. ')')
end
local token = us_of(t)
if counter and not greater(token, counter) then
  token = int(tonumber(counter) + 1)
end
if ARGV[8] == '0' then
  redis.call('SET', KEYS[2], token) -- drops any TTL: permanent from now on
else
  local left = redis.call('PTTL', KEYS[2])
  if left == -1 then
    redis.call('SET', KEYS[2], token, 'KEEPTTL') -- some holder wanted it kept
  else
    redis.call('SET', KEYS[2], token, 'PX', math.max(tonumber(ARGV[8]), tonumber(ARGV[2]), left))
  end
end
if owners == 0 and ARGV[4] == '0' then
  -- The common case: a free key, no MinHold.
  if mode == 'w' then
    redis.call('HSET', key, owner .. ':t', token, 'writer', owner, owner, '1')
  else
    redis.call('HSET', key, owner .. ':t', token, owner .. ':r', '1')
  end
  redis.call('PEXPIRE', key, ARGV[2])
else
  local ttl = tonumber(ARGV[2])
  local fields = {owner .. ':t', token}
  if mode == 'w' then
    table.insert(fields, 'writer'); table.insert(fields, owner)
    table.insert(fields, owner); table.insert(fields, '1')
  else
    table.insert(fields, owner .. ':r'); table.insert(fields, '1')
  end
  if ARGV[4] ~= '0' then
    table.insert(fields, owner .. ':m'); table.insert(fields, now + tonumber(ARGV[4]))
  end
  if owners > 0 then
    -- Readers join readers: each needs an expiry of its own now, the one
    -- whose expiry was the key's included.
    table.insert(fields, owner .. ':x'); table.insert(fields, now + ttl)
    if lone then
      table.insert(fields, lone .. ':x'); table.insert(fields, now + redis.call('PTTL', key))
    end
  end
  redis.call('HSET', key, unpack(fields))
  if owners == 0 then
    redis.call('PEXPIRE', key, ARGV[2])
  else
    extend_key(key, ttl)
  end
end
-- Lockers other than this one may be timing a hand-off to the one a release
-- named: a writer tells them it is taken; a reader lets their readers in.
local others = redis.call('ZCARD', KEYS[3])
if others > 0 and locker ~= '' and redis.call('ZSCORE', KEYS[3], locker) then others = others - 1 end
if others > 0 then
  if mode == 'w' then
    redis.call(ARGV[7], KEYS[4], 'taken')
  else
    redis.call(ARGV[7], KEYS[4], 'read')
  end
end
return {1, tonumber(token)}
