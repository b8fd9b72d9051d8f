-- set_counts.lua: set an owner's hold counts: re-entry, downgrade, partial and final release.
-- Counts are set, not incremented, so a retried call is harmless.
-- KEYS[1] lock hash, KEYS[2] waiting acquisitions (see acquire.lua),
-- KEYS[3] the owner's release marker, KEYS[4] fencing counter
-- ARGV[1] owner id,
-- ARGV[2] for a final release (counts 0, 0): ms to keep the release marker, so
-- that a retry of this call knows it applied; 0 drops a hold that was never
-- handed to its caller: at once, ignoring MinHold, and with no marker;
-- ARGV[3] write count, ARGV[4] read count: absent when 0 (a final release
-- sends neither)
-- Returns 1 when applied (or, for a final release, applied before), 0 when the
-- hold has expired, -1 when another owner holds the key.
-- A release that frees the key grants it to the oldest live registration
-- when that is a writer that takes grants: the script takes the key for it
-- as acquire.lua would, for the registration's TTL or what is left of the
-- registration if less, and publishes 'grant <Locker id> <owner> <token>
-- <ms the grant lasts>': the other Lockers' waiters sleep no longer than
-- that, since a grantee that crashed never renews it and its expiry
-- publishes nothing.
-- The waiter learns it holds the key without another round trip; its
-- registering request was sent before the grant, so the TTL counted from
-- that request's send time ends no later than the grant does.
-- Otherwise publishes 'free' when the key is free, 'linger' when a released
-- hold is kept for MinHold, and 'held' when other owners still hold it
-- (their expiry may be sooner than the one a waiter is sleeping on); all
-- three name the Locker that should act: the one of the oldest live
-- registration ('' when none is).
-- A final release tells nobody when the key's 'q' is absent (nobody
-- registered to wait since the hold was taken): it neither reads the queue
-- nor publishes.
-- A drop (ARGV[2] 0) adds the owner it dropped to what it publishes
-- ('free <Locker id> <owner>'): the waiter that dropped a hold it could not
-- use (a split vote on a quorum) must not be woken by its own drop.
-- Publishes 'read' when only readers remain after a writer downgraded.
-- Permits (see prelude.lua): a final release of one permit, while other
-- owners keep theirs, grants that one permit as a release of the whole key
-- would: to the oldest live registration if it is a writer that takes
-- grants for the same number of permits; else it publishes 'free' naming
-- that registration's Locker. A release that frees no permit (a partial
-- one, or one kept for MinHold) grants nothing.
local key, waiting, done, counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, marker, writes, reads = ARGV[1], ARGV[2], ARGV[3] or '0', ARGV[4] or '0'
local final = writes == '0' and reads == '0'

local got = redis.pcall('HMGET', key, owner .. ':t', owner .. ':x', 'writer', owner .. ':m', 'q')
if failed(got) then return wrong_type(key, 'a lock') end
-- The common cases, a lone owner's final release, whether acquisitions
-- wait or not, end here, before the helpers below are made (each a
-- closure, made at every call).
if release_lone(key, waiting, done, counter, marker, final, got) then return 1 end
local token, x, writer, keep, queued = got[1], got[2], got[3], got[4], got[5]

-- The clock is read only when a decision needs it.
local now, t = false, false
local function clock()
  if not now then
    t = redis.call('TIME')
    now = ms_of(t)
  end
  return now
end

-- tell tells the waiting acquisitions what happened (prelude's notify);
-- let_go calls it only when the key's 'q' says some may wait. A drop adds
-- the owner it dropped.
local function tell(what, permits)
  clock()
  local dropped = ''
  if marker == '0' then dropped = ' ' .. owner end
  notify(key, waiting, counter, what, dropped, permits, t)
end

-- gone answers for a hold that is not there, or has expired: a retried
-- final release whose first try applied (its marker), another owner's key,
-- or nobody's.
local function gone()
  -- What Redis recorded, not timing, tells a retried release from a lost one.
  if final and marker ~= '0' and redis.call('EXISTS', done) == 1 then return 1 end
  if redis.call('EXISTS', key) == 1 and sweep(key, clock()) > 0 then return -1 end
  return 0
end

-- recount sets the counts of a hold that goes on: a re-entry, a partial
-- release, a downgrade (the writer keeps only read leases: readers may
-- join).
local function recount(writer)
  if writes ~= '0' then
    redis.call('HSET', key, owner, writes)
  else
    redis.call('HDEL', key, owner)
  end
  if reads ~= '0' then
    redis.call('HSET', key, owner .. ':r', reads)
  else
    redis.call('HDEL', key, owner .. ':r')
  end
  if writes == '0' and writer == owner then
    redis.call('HDEL', key, 'writer')
    redis.call(PUBLISH, channel_of(key), 'read')
  end
  return 1
end

-- leave ends a hold that shares the key with other owners' holds: the key
-- goes when none is left; the waiters are told if any may wait (queued).
local function leave(writer, queued)
  -- Redis deletes the hash with its last field.
  if writer == owner then
    redis.call('HDEL', key, owner, owner .. ':r', owner .. ':x', owner .. ':t', owner .. ':m', owner .. ':i', 'writer')
  else
    redis.call('HDEL', key, owner, owner .. ':r', owner .. ':x', owner .. ':t', owner .. ':m', owner .. ':i')
  end
  -- Only a key without a writer can be one of permits.
  local permits = writer ~= owner and redis.call('HGET', key, 'permits')
  -- The fields that are nobody's hold: with no owner left, the key goes.
  local rest = 0
  if permits then rest = rest + 1 end
  if queued then rest = rest + 1 end
  if rest > 0 and redis.call('HLEN', key) == rest then
    redis.call('DEL', key)
  end
  if not queued then return 1 end
  if redis.call('EXISTS', key) == 0 then
    tell('free')
  elseif permits then
    -- One permit freed while others keep theirs: it goes to one waiter.
    tell('free', permits)
  else
    -- Others still hold it; the first waiter re-reads how long they may.
    tell('held')
  end
  return 1
end

-- let_go ends the hold: it is kept for MinHold, or the key is freed, or
-- left to the other owners, and the waiters are told, if any may wait
-- (queued, the key's 'q').
local function let_go(x, writer, keep, queued)
  if marker ~= '0' then
    redis.call('SET', done, '1', 'PX', marker)
  end
  if keep and tonumber(keep) > clock() and marker ~= '0' then
    redis.call('HDEL', key, owner, owner .. ':r')
    redis.call('HSET', key, owner .. ':x', keep)
    extend_key(key, tonumber(keep) - clock())
    if queued then tell('linger') end
    return 1
  end
  if x then return leave(writer, queued) end
  -- The lone owner: the key is its alone.
  redis.call('DEL', key)
  if queued then tell('free') end
  return 1
end

if not token or (x and tonumber(x) <= clock()) then return gone() end
-- A permit holder writes without being the key's 'writer' (see prelude.lua).
if writes ~= '0' and writer ~= owner and not redis.call('HGET', key, 'permits') then return -1 end
if not final then return recount(writer) end
return let_go(x, writer, keep, queued)
