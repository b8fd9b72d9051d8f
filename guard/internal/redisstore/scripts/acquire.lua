-- acquire.lua: a fresh hold, write or read.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] waiting acquisitions
-- (zset: registration -> its expiry, server ms)
-- ARGV[1] owner id, ARGV[2] TTL ms, ARGV[3] 'w' or 'r',
-- ARGV[4] the acquisition's registration, to add when busy ('' for a caller
-- that will not wait): '<Locker id> <owner> <kind> <TTL ms> <MinHold ms>
-- <FenceTTL ms>[ <identity>]', kind 'g' for a writer that takes a grant (set_counts.lua),
-- 'w' for one that does not, 'r' for a reader, followed by n for a writer
-- of one of n permits ('g4'); the identity comes last, as it may hold
-- spaces. A registration lasts twice the TTL: a waiting acquisition
-- attempts again at least once per TTL.
-- ARGV[5] the holder's identity, recorded with a fresh hold as <owner>:i,
-- then, each absent when it and those after it have their defaults:
-- ARGV[6] MinHold ms (0), ARGV[7] FenceTTL ms (0; see mint), ARGV[8]
-- permits: 1 for a plain lock, n for one of n permits (a writer)
-- Every argument costs the server a string and a slot in ARGV: what the
-- script can derive (the channel, the publish command, the registration's
-- expiry) or assume (the defaults) is not sent.
-- Returns {1, token} when acquired; {0, ms until the latest holder expires
-- (for a permit: until the first holder expires), the newest token minted
-- so far (0 when none)} when busy: a grant with a token not above it was
-- made before this attempt, and is gone; {-1, n} when the key's holders
-- hold n permits, not ARGV[8] (nothing changed).
-- An owner that holds the key already (a retry after a lost reply, or a
-- waiter that a release granted the key to) has its hold extended to the
-- TTL from now, as a renewal would, and gets its token.
-- When other acquisitions wait for the key, publishes 'taken' for a write
-- hold and 'read' for a read hold (their readers may join it).
local key, owner, mode, member, identity = KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[5] or ''
local min_hold, fence_ttl, permits = ARGV[6] or '0', ARGV[7] or '0', ARGV[8] or '1'
local t = redis.call('TIME')
-- The common case, a free key nobody waits for, is taken here, before the
-- helpers below are made (each a closure, made at every call).
local taken, present = take_free(key, KEYS[2], KEYS[3], owner, mode, ARGV[2], identity, min_hold, fence_ttl, permits, t)
if taken then return taken end
-- The clock in ms, read from t only when a decision needs it: a free key
-- without MinHold needs only the token, which is in µs.
local now = 0

-- holders looks at a key that exists: it sweeps expired holds and returns
-- a reply to give at once (the owner holds the key already: its hold is
-- extended; its holders hold another number of permits: refused), or nil
-- and what the attempt decides on.
local function holders()
  now = ms_of(t)
  local h = redis.pcall('HGETALL', key)
  if failed(h) then return wrong_type(key, 'a lock') end
  -- The fields as they are once swept: what an HMGET would read now.
  local owners, latest, writer, lone, earliest, fields = sweep(key, now, h)
  local token, x = fields[owner .. ':t'], fields[owner .. ':x']
  if token then
    local ttl = tonumber(ARGV[2])
    if x then
      redis.call('HSET', key, owner .. ':x', math.max(tonumber(x), now + ttl))
    end
    extend_key(key, ttl)
    if member ~= '' then redis.call('ZREM', KEYS[3], member) end
    return {1, tonumber(token)}
  end
  -- Holders that disagree on the number of permits are refused, rather
  -- than let in beside holders that count differently.
  if owners > 0 and (fields.permits or '1') ~= permits then
    return {-1, tonumber(fields.permits or '1')}
  end
  return nil, owners, latest, writer, lone, earliest, fields.q
end

-- busy returns the busy reply when the key cannot be taken now, having
-- registered the acquisition in the lock's queue if it will wait (and set
-- the key's 'q' unless told, set already); nil when it can be taken.
local function busy(owners, latest, writer, earliest, told)
  local full, until_ms = owners > 0 and (mode == 'w' or writer), latest
  if permits ~= '1' then
    -- One of n permits: busy while n owners hold one; the first to expire frees one.
    full, until_ms = owners >= tonumber(permits), earliest
  end
  if not full then return nil end
  -- The newest token, read before the registration is written: a counter
  -- of another type is refused, naming it, with nothing written but what
  -- the sweep of expired holders wrote, as any attempt's does.
  local minted = redis.pcall('GET', KEYS[2])
  if failed(minted) then return wrong_type(KEYS[2], 'a fencing counter') end
  if member ~= '' then
    local registration = 2 * tonumber(ARGV[2])
    redis.call('ZADD', KEYS[3], now + registration, member)
    extend_key(KEYS[3], registration)
    if not told then
      redis.call('HSET', key, 'q', '1') -- the holders' release must tell it
    end
  end
  return {0, until_ms - now, tonumber(minted) or 0}
end

-- A queue of another type is refused, naming it, before anything is written.
local queued, bad = queue_size(KEYS[3])
if not queued then return bad end
local owners, latest, writer, lone, earliest, told = 0, 0, false, false, 0, false
if lock_exists(key, present, queued) then
  local reply
  reply, owners, latest, writer, lone, earliest, told = holders()
  if reply then return reply end
end
local refused = busy(owners, latest, writer, earliest, told)
if refused then return refused end

-- The key can be taken. The helpers that take it are made only now: a
-- busy attempt (a waiter's registration) makes none of them.

-- take_permit writes a fresh hold of one permit (see prelude.lua): permit
-- holders join one another as readers do.
local function take_permit(token, owners, lone, waited)
  if owners == 0 and min_hold == '0' and not waited then
    -- A free permit, no MinHold: the fields permit_fields would give.
    redis.call('HSET', key, owner .. ':t', token, owner, '1', 'permits', permits, owner .. ':i', identity)
    redis.call('PEXPIRE', key, ARGV[2])
    return
  end
  if now == 0 then now = ms_of(t) end -- a free key: holders() did not read it
  local ttl, keep = tonumber(ARGV[2]), false
  if min_hold ~= '0' then keep = now + tonumber(min_hold) end
  local fields = permit_fields(owner, token, permits, owners > 0 and now + ttl, keep, identity)
  if waited then
    table.insert(fields, 'q'); table.insert(fields, '1')
  end
  if lone then
    table.insert(fields, lone .. ':x'); table.insert(fields, now + redis.call('PTTL', key))
  end
  redis.call('HSET', key, unpack(fields))
  if owners == 0 then
    redis.call('PEXPIRE', key, ARGV[2])
  else
    extend_key(key, ttl)
  end
end

-- take_hold writes a fresh write or read hold of a plain lock; waited
-- when other acquisitions are queued for the key.
local function take_hold(token, owners, lone, waited)
  if owners == 0 and min_hold == '0' and not waited then
    -- The common case: a free key, no MinHold, nobody waiting.
    if mode == 'w' then
      redis.call('HSET', key, owner .. ':t', token, 'writer', owner, owner, '1', owner .. ':i', identity)
    else
      redis.call('HSET', key, owner .. ':t', token, owner .. ':r', '1', owner .. ':i', identity)
    end
    redis.call('PEXPIRE', key, ARGV[2])
    return
  end
  if now == 0 then now = ms_of(t) end -- a free key: holders() did not read it
  local ttl = tonumber(ARGV[2])
  local fields = {owner .. ':t', token, owner .. ':i', identity}
  if mode == 'w' then
    table.insert(fields, 'writer'); table.insert(fields, owner)
    table.insert(fields, owner); table.insert(fields, '1')
  else
    table.insert(fields, owner .. ':r'); table.insert(fields, '1')
  end
  if min_hold ~= '0' then
    table.insert(fields, owner .. ':m'); table.insert(fields, now + tonumber(min_hold))
  end
  if waited then
    table.insert(fields, 'q'); table.insert(fields, '1')
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

-- tell_others: other acquisitions may be timing a hand-off to the one a
-- release named; a writer tells them it is taken, a reader lets their
-- readers in.
local function tell_others()
  if mode == 'w' then
    redis.call(PUBLISH, channel_of(key), 'taken')
  else
    redis.call(PUBLISH, channel_of(key), 'read')
  end
end

local token, err = mint(KEYS[2], t, fence_ttl, ARGV[2])
if not token then return err end
-- queued counted this acquisition's own registration, if it had one.
local others = queued
if others > 0 and member ~= '' then others = others - redis.call('ZREM', KEYS[3], member) end
if permits ~= '1' then
  take_permit(token, owners, lone, others > 0)
else
  take_hold(token, owners, lone, others > 0)
end
if others > 0 then tell_others() end
return {1, token} -- digits, as the counter holds them
