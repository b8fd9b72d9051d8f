-- set_counts.lua: set an owner's hold counts: re-entry, downgrade, partial and final release.
-- Counts are set, not incremented, so a retried call is harmless.
-- KEYS[1] lock hash, KEYS[2] release channel, KEYS[3] waiting Lockers (see acquire.lua),
-- KEYS[4] the owner's release marker
-- ARGV[1] owner id, ARGV[2] write count, ARGV[3] read count, ARGV[4] 'PUBLISH' or 'SPUBLISH',
-- ARGV[5] id of the releasing Locker if it has no waiters of its own for this key, else '',
-- ARGV[6] for a final release (counts 0, 0): ms to keep the release marker, so
-- that a retry of this call knows it applied; 0 drops a hold that was never
-- handed to its caller: at once, ignoring MinHold, and with no marker
-- Returns 1 when applied (or, for a final release, applied before), 0 when the
-- hold has expired, -1 when another owner holds the key.
-- Publishes 'free' when the key is free, 'read' when only readers remain after a
-- writer downgraded, 'linger' when a released hold is kept for MinHold, and
-- 'held' when other owners still hold it (their expiry may be sooner than
-- the one a waiter is sleeping on). All but 'read' name the Locker that should
-- act: the registered one whose registration is oldest ('' when none is).
local key, chan, owner = KEYS[1], KEYS[2], ARGV[1]
local writes, reads, publish = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local final, marker = writes == 0 and reads == 0, tonumber(ARGV[6])
local now = now_ms()

-- next_waiter names the Locker to wake: the live registration refreshed
-- longest ago, other than a releaser that has nobody left waiting.
local function next_waiter()
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, 1)) do
    if id ~= ARGV[5] then return id end
  end
  return ''
end

local got = redis.call('HMGET', key, owner .. ':x', 'writer', owner .. ':m')
local x, writer, keep = got[1], got[2], tonumber(got[3] or '0')
if not x or tonumber(x) <= now then
  -- What Redis recorded, not timing, tells a retried release from a lost one.
  if final and marker > 0 and redis.call('EXISTS', KEYS[4]) == 1 then return 1 end
  if redis.call('EXISTS', key) == 1 and sweep(key, now) > 0 then return -1 end
  return 0
end
if writes > 0 and writer ~= owner then return -1 end
if writes > 0 or reads > 0 then
  if writes > 0 then
    redis.call('HSET', key, owner, writes)
  else
    redis.call('HDEL', key, owner)
  end
  if reads > 0 then
    redis.call('HSET', key, owner .. ':r', reads)
  else
    redis.call('HDEL', key, owner .. ':r')
  end
  if writes == 0 and writer == owner then
    redis.call('HDEL', key, 'writer')
    redis.call(publish, chan, 'read')
  end
  return 1
end
if marker > 0 then
  redis.call('SET', KEYS[4], 1, 'PX', marker)
end
if keep > now and marker > 0 then
  redis.call('HDEL', key, owner, owner .. ':r')
  redis.call('HSET', key, owner .. ':x', keep)
  extend_key(key, keep - now)
  redis.call(publish, chan, 'linger ' .. next_waiter())
  return 1
end
-- Redis deletes the hash with its last field.
if writer == owner then
  redis.call('HDEL', key, owner, owner .. ':r', owner .. ':x', owner .. ':t', owner .. ':m', 'writer')
else
  redis.call('HDEL', key, owner, owner .. ':r', owner .. ':x', owner .. ':t', owner .. ':m')
end
if redis.call('EXISTS', key) == 0 then
  redis.call(publish, chan, 'free ' .. next_waiter())
else
  -- Others still hold it; the first waiter re-reads how long they may.
  redis.call(publish, chan, 'held ' .. next_waiter())
end
return 1
