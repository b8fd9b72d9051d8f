-- prelude.lua: helpers prepended to every guard script.
--
-- A lock is one hash (KEYS[1], "<prefix>{<name>}"):
--   writer      owner id of the write holder (absent when only readers hold it)
--   <owner>     write hold count of <owner>
--   <owner>:r   read hold count of <owner>
--   <owner>:t   fencing token of <owner>'s hold: every owner has one
--   <owner>:x   expiry of <owner>'s hold, server time in ms; absent when
--               <owner> is the only owner, whose hold then ends with the key
--   <owner>:m   MinHold: keep the hold until this server time (ms), even after release
--   <owner>:i   who holds it (WithIdentity): set with the hold's token, dropped with it
--   q           '1' while acquisitions may wait for the key: set by one
--               that registers (acquire.lua) and on a hold taken while others
--               are queued, so that a release with nobody waiting neither
--               reads the queue nor publishes; a release of a lone owner
--               takes it with the key, and the next hold sets it again if
--               registrations remain
--   permits     n, for a key whose holds are permits (Permits(n), n > 1): up to
--               n owners hold one each, each with a write count and no
--               'writer'; absent for a plain lock (n = 1)
-- The key's own PEXPIRE is always >= the latest <owner>:x, so a crashed fleet
-- leaves nothing behind; the per-owner expiry lets one crashed reader free its
-- share without waiting for the others. A lone owner needs none: the key's
-- expiry is its own, which spares the common case a clock read and a field.
-- Permit holders are kept as readers are: each owner its own expiry once a
-- second one joins, so a crashed holder's permit frees within its TTL.
-- Owner ids are upper-case base32, so they never collide with 'writer',
-- 'q' or 'permits'.
--
-- Numbers handed to redis.call are formatted by the server (with a printf
-- per number), so values that arrive as strings in ARGV are passed on as
-- they came, and constants are written as strings.

if redis.replicate_commands then redis.replicate_commands() end

-- PUBLISH is the command that notifies waiters: 'SPUBLISH' on Cluster,
-- where newScripts rewrites this line, so that no call carries it.
local PUBLISH = 'PUBLISH'

-- channel_of returns the release channel of lock key: waiters subscribe
-- to it (keysFor names it the same). A channel is not a key, so no script
-- declares it; it carries the lock's hash tag, so on Cluster its shard is
-- the lock's.
local function channel_of(key)
  return key .. ':released'
end

-- ms_of returns a TIME reply in ms.
local function ms_of(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- now_ms returns the server's time in ms.
local function now_ms()
  return ms_of(redis.call('TIME'))
end

-- us_of returns a TIME reply in µs as a string of digits, built without
-- the printf a number would need.
local function us_of(t)
  return t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
end

-- ms_digits returns a TIME reply in ms as a string of digits: us_of
-- without its last three, built without a printf.
local function ms_digits(t)
  return string.sub(us_of(t), 1, -4)
end

-- greater reports whether digit string a is a larger integer than b; neither
-- has leading zeros.
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

-- int formats a number as Redis expects an integer: Lua would print a
-- token in µs (16 digits) as 1.7e+15, and '%d' casts to a C long, which is
-- 32 bits on some builds.
local function int(n)
  return string.format('%.0f', n)
end

local function drop_owner(key, o)
  redis.call('HDEL', key, o, o .. ':r', o .. ':x', o .. ':t', o .. ':m', o .. ':i')
end

-- wrong_type is the error reply for a key that holds another Redis type
-- than the one guard keeps there (what): it names the key and its type,
-- where Redis's own message names the script's line.
local function wrong_type(key, what)
  return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. redis.call('TYPE', key)['ok'] .. ', not ' .. what)
end

-- failed reports whether a redis.pcall reply is an error.
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- reraise answers err, what pcall caught from a function that raised it,
-- with the error code it would have had uncaught (without Redis's script
-- location): what a redis.call raised reaches pcall as a string, and one
-- that starts with an error code (WRONGTYPE, OOM, READONLY) is answered as
-- that error; anything else is raised again.
local function reraise(err)
  if type(err) == 'string' and string.match(err, '^[A-Z][A-Z]+ ') then
    return redis.error_reply(err)
  end
  error(err, 0)
end

-- queue_size returns the number of registrations in queue (a lock's
-- waiting acquisitions), or nil and an error reply that names the key when
-- it holds another Redis type.
local function queue_size(queue)
  local n = redis.pcall('ZCARD', queue)
  if failed(n) then return nil, wrong_type(queue, 'a queue of waiters') end
  return n
end

-- sweep removes owners whose expiry has passed on the server's clock and
-- returns the number of live owners, the latest expiry, the writer, the
-- owner whose expiry is the key's (a lone owner; false when none), the
-- earliest expiry (when the first permit could free), and the key's fields
-- as they are once swept (field -> value). h is the key's HGETALL, when
-- the caller read it.
local function sweep(key, now, h)
  h = h or redis.call('HGETALL', key)
  local writer, expiry, owners, fields = false, {}, {}, {}
  for i = 1, #h, 2 do
    local f = h[i]
    fields[f] = h[i + 1]
    if f == 'writer' then
      writer = h[i + 1]
    else
      local suffix = string.sub(f, -2)
      if suffix == ':x' then
        expiry[string.sub(f, 1, -3)] = tonumber(h[i + 1])
      elseif suffix == ':t' then
        owners[#owners + 1] = string.sub(f, 1, -3)
      end
    end
  end
  local live, latest, lone, dead, earliest = 0, 0, false, {}, 0
  for _, o in ipairs(owners) do
    local x = expiry[o] or now + math.max(redis.call('PTTL', key), 0)
    if x <= now then
      dead[#dead + 1] = o
    else
      live = live + 1
      if x > latest then latest = x end
      if earliest == 0 or x < earliest then earliest = x end
      if not expiry[o] then lone = o end
    end
  end
  for _, o in ipairs(dead) do
    drop_owner(key, o)
    fields[o], fields[o .. ':r'], fields[o .. ':x'], fields[o .. ':t'], fields[o .. ':m'], fields[o .. ':i'] = nil, nil, nil, nil, nil, nil
    if o == writer then
      redis.call('HDEL', key, 'writer')
      writer, fields.writer = false, nil
    end
  end
  if live == 0 then
    redis.call('DEL', key)
    fields = {}
  end
  return live, latest, writer, lone, earliest, fields
end

-- permit_fields returns the fields of owner o's fresh hold of one permit
-- (acquire.lua, and a grant in set_counts.lua): token, a write count, the
-- holder's identity and no 'writer'. x is o's expiry (server ms) when other
-- owners hold permits of the key; false when o holds it alone, whose expiry
-- is then the key's and whose hold records n, the key's number of permits.
-- keep is the MinHold end, false for none; identity is what WithIdentity
-- recorded ('' for none), kept as <owner>:i as every hold keeps it.
local function permit_fields(o, token, n, x, keep, identity)
  local f = {o .. ':t', token, o, '1', o .. ':i', identity}
  if x then
    f[7], f[8] = o .. ':x', x
  else
    f[7], f[8] = 'permits', n
  end
  if keep then
    f[9], f[10] = o .. ':m', keep
  end
  return f
end

local function extend_key(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

-- digits_of reads last, what fencing counter key counter held: its digits,
-- or nil and an error reply when it is not a counter: "inf", "1e300" or a
-- number beyond what a double holds exactly would make the next token
-- wrong.
local function digits_of(counter, last)
  local digits = string.match(last, '^0*(%d+)$')
  if not (digits and not greater(digits, '9007199254740991')) then
    return nil, redis.error_reply('WRONGTYPE ' .. counter .. ' is not a fencing counter (holds ' .. string.sub(last, 1, 32) .. ')')
  end
  return digits
end

-- counter_of reads a fencing counter: its digits, false when there is
-- none, or nil and an error reply when the key holds anything else (see
-- digits_of).
local function counter_of(counter)
  local last = redis.pcall('GET', counter)
  if failed(last) then return nil, wrong_type(counter, 'a fencing counter') end
  if not last then return false end
  return digits_of(counter, last)
end

-- mint returns the next fencing token from the counter, t being a TIME
-- reply, and stores it; or false and an error reply when the counter key
-- holds something else. A token is never below the server's clock in µs,
-- so a counter that a failover lost, or that expired, still cannot repeat
-- a token already handed out, as long as the servers' clocks agree within
-- the failover. fence_ttl (ms, a string) 0 makes the counter permanent;
-- otherwise a counter that is not already permanent lives at least that
-- long, and at least ttl ms, from now.
local function mint(counter, t, fence_ttl, ttl)
  local token = us_of(t)
  local last = false
  if fence_ttl ~= '0' then
    -- A counter that is not there (a key per task or request, the usual
    -- FenceTTL key) is written with its TTL in one command; one that is
    -- there is left as it is and read (NX with GET, Redis 7.0 and later).
    local ms = fence_ttl
    if tonumber(ttl) > tonumber(fence_ttl) then ms = ttl end
    last = redis.pcall('SET', counter, token, 'NX', 'PX', ms, 'GET')
    if not last then return token end
    if failed(last) then
      if string.sub(last.err, 1, 9) == 'WRONGTYPE' then
        return false, wrong_type(counter, 'a fencing counter')
      end
      last = nil -- an older server: NX with GET is a syntax error there
    elseif type(last) ~= 'string' then
      last = nil -- a server that answers as SET without GET: read it
    end
  end
  local digits, err
  if last then
    digits, err = digits_of(counter, last)
  else
    digits, err = counter_of(counter)
  end
  if digits == nil then return false, err end
  if digits and not greater(token, digits) then
    token = int(tonumber(digits) + 1)
  end
  if fence_ttl == '0' then
    redis.call('SET', counter, token) -- drops any TTL: permanent from now on
  else
    -- A counter that is not there has no TTL to keep.
    local left = -2
    if digits then left = redis.call('PTTL', counter) end
    if left == -1 then
      redis.call('SET', counter, token, 'KEEPTTL') -- some holder wanted it kept
    else
      redis.call('SET', counter, token, 'PX', math.max(tonumber(fence_ttl), tonumber(ttl), left))
    end
  end
  return token
end

-- take_free is acquire.lua's common case: the lock key and its queue of
-- waiters (queue) do not exist, and the hold keeps no MinHold (min_hold
-- '0'): it takes the key for owner, with the fields take_hold or
-- take_permit would write for a free key, and returns acquire.lua's
-- reply ({1, token}, or an error reply from mint). Otherwise it returns
-- nil and how many of the two exist (see lock_exists; nil when it did not
-- ask), and changes nothing. It is a function of the prelude: in the
-- function library it is made once, where acquire.lua's own helpers are
-- made at every call (run by hash, the prelude is run at every call).
local function take_free(key, counter, queue, owner, mode, ttl, identity, min_hold, fence_ttl, permits, t)
  if min_hold ~= '0' then return nil end
  local present = redis.call('EXISTS', key, queue)
  if present ~= 0 then return nil, present end
  local token, err = mint(counter, t, fence_ttl, ttl)
  if not token then return err end
  if permits ~= '1' then
    redis.call('HSET', key, owner .. ':t', token, owner, '1', 'permits', permits, owner .. ':i', identity)
  elseif mode == 'w' then
    redis.call('HSET', key, owner .. ':t', token, 'writer', owner, owner, '1', owner .. ':i', identity)
  else
    redis.call('HSET', key, owner .. ':t', token, owner .. ':r', '1', owner .. ':i', identity)
  end
  redis.call('PEXPIRE', key, ttl)
  return {1, token}
end

-- lock_exists reports whether the lock key exists, given present, the
-- number of the lock and its queue that exist as take_free counted them
-- (nil: not counted), and queued, the queue's size: a queue that exists
-- holds a registration (Redis deletes an empty one), so whichever is left
-- of present is the lock. It spares a waiting acquisition the second
-- EXISTS.
local function lock_exists(key, present, queued)
  if present == nil then return redis.call('EXISTS', key) == 1 end
  if queued > 0 then present = present - 1 end
  return present > 0
end

-- grant takes the free key for registration r in queue, whose expiry is
-- at (server ms), for set_counts.lua, and reports whether it did; t is the
-- release's TIME reply, now the same in ms. permits is the key's number of
-- permits when other owners still hold theirs and one is free: only a
-- registration for as many permits may take it. more says registrations
-- remain, which the grantee's release must tell (see 'q'); a permit's key
-- keeps the 'q' it has. A registration's kind may carry its number of
-- permits ('g4') and its identity may follow its six fields.
local function grant(key, queue, counter, r, at, permits, more, t, now)
  local locker, o, kind, n, ttl, min_hold, fence_ttl, rest = string.match(r, '^(%S+) (%S+) (%a)(%d*) (%d+) (%d+) (%d+)(.*)$')
  if kind ~= 'g' then return false end
  if n == '' then n = '1' end
  if permits and n ~= permits then return false end
  local identity = string.sub(rest, 2) -- after its space; '' when none
  -- The registration's TTL, or what is left of the registration if less:
  -- passed on as the digits it came in when it is the TTL (most grants),
  -- sparing the server a printf.
  local left = ttl
  if at - now < tonumber(ttl) then left = int(at - now) end
  -- A counter of another type is reported to the waiter by its own attempt.
  local token = mint(counter, t, fence_ttl, ttl)
  if not token then return false end
  if n ~= '1' then
    -- A permit: beside other holders it needs an expiry of its own.
    local keep = min_hold ~= '0' and now + tonumber(min_hold)
    local fields = permit_fields(o, token, n, permits and now + tonumber(left), keep, identity)
    if more then
      table.insert(fields, 'q'); table.insert(fields, '1')
    end
    redis.call('HSET', key, unpack(fields))
  elseif min_hold == '0' and not more then
    redis.call('HSET', key, o .. ':t', token, 'writer', o, o, '1', o .. ':i', identity)
  elseif min_hold == '0' then
    redis.call('HSET', key, o .. ':t', token, 'writer', o, o, '1', o .. ':i', identity, 'q', '1')
  elseif not more then
    redis.call('HSET', key, o .. ':t', token, 'writer', o, o, '1', o .. ':i', identity, o .. ':m', now + tonumber(min_hold))
  else
    redis.call('HSET', key, o .. ':t', token, 'writer', o, o, '1', o .. ':i', identity, o .. ':m', now + tonumber(min_hold), 'q', '1')
  end
  if permits then
    extend_key(key, tonumber(left))
  else
    redis.call('PEXPIRE', key, left)
  end
  redis.call('ZREM', queue, r)
  redis.call(PUBLISH, channel_of(key), 'grant ' .. locker .. ' ' .. o .. ' ' .. token .. ' ' .. left)
  return true
end

-- notify tells the acquisitions waiting in queue what a release of key did
-- (what: 'free', 'held' or 'linger'; see set_counts.lua), t being the
-- release's TIME reply: it drops the registrations that have expired,
-- grants a free key to the oldest live one if it takes grants (grant),
-- and otherwise publishes what, naming that registration's Locker ('' when
-- none), then dropped (' <owner>' for a drop, else ''). A queue of another
-- type, which acquire.lua reports, names nobody: a release never fails
-- for it.
local function notify(key, queue, counter, what, dropped, permits, t)
  if failed(redis.pcall('ZREMRANGEBYSCORE', queue, '-inf', ms_digits(t))) then
    redis.call(PUBLISH, channel_of(key), what .. ' ' .. dropped)
    return
  end
  -- The first two: a grant to the first must know whether others remain.
  local first = redis.call('ZRANGE', queue, 0, 1, 'WITHSCORES')
  if first[1] and what == 'free' and grant(key, queue, counter, first[1], tonumber(first[2]), permits, first[3] ~= nil, t, ms_of(t)) then return end
  local next = first[1] and string.match(first[1], '^%S+') or ''
  redis.call(PUBLISH, channel_of(key), what .. ' ' .. next .. dropped)
end

-- release_lone is set_counts.lua's common case: the final release (final)
-- of a hold that is the key's alone (no expiry of its own) and kept for no
-- MinHold, got being set_counts' HMGET of the owner's token and expiry,
-- 'writer', its MinHold and 'q'. It marks the release as applied (done,
-- for marker ms) and deletes the key, as let_go does, then, when the key's
-- 'q' says acquisitions may wait in queue, tells them (notify), granting
-- the key to the first if it takes grants; it reports whether it did all
-- that, and otherwise changes nothing. A drop (marker '0') is left to
-- set_counts.lua.
local function release_lone(key, queue, done, counter, marker, final, got)
  if not final or marker == '0' or not got[1] or got[2] or got[4] then return false end
  redis.call('SET', done, '1', 'PX', marker)
  redis.call('DEL', key)
  if got[5] then notify(key, queue, counter, 'free', '', false, redis.call('TIME')) end
  return true
end
