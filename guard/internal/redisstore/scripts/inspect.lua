-- inspect.lua: what a lock is at one instant of the server's clock; with
-- 'release', also the operator's override that ends every hold on it.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] waiting acquisitions
-- (see acquire.lua)
-- ARGV[1] 'read' or 'release'
-- Returns a flat array:
--   the fencing counter's digits ('' when there is none),
--   the key's number of permits (prelude.lua's 'permits'; 0 for a free key
--     or a plain lock),
--   the number of holders n, then n times: owner, identity ('' when the
--     hold has none), 1 if it is the writer or holds a permit (a write
--     hold) else 0, write count, read
--     count, fencing token (digits), ms until it expires (-1: the key has
--     no expiry, which no guard script leaves), ms until its MinHold ends
--     (0 when none or passed);
--   the number of live registrations m, then m times: the registration
--     (see acquire.lua), ms until it expires.
-- Holders whose expiry has passed but whom no script has swept yet, and
-- registrations that expired, are left out: they hold and wait for nothing.
-- A hold released but kept for MinHold is listed with counts 0 and 0.
-- 'release' then deletes the lock hash, so every holder's next renewal finds
-- its hold gone, and names the Locker of the oldest live registration in a
-- 'free' message, as a release that cannot grant does (set_counts.lua): that
-- Locker's first waiter tries at once, the others after a grace. The
-- fencing counter is left alone, so the next token is still higher.
-- Reads only with 'read'.
local key = KEYS[1]
local now = now_ms()

-- check_types refuses keys of the lock that hold another Redis type,
-- naming the key; it returns the lock's type.
local function check_types()
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a lock')
  end
  local queue = redis.call('TYPE', KEYS[3])['ok']
  if queue ~= 'none' and queue ~= 'zset' then
    return nil, redis.error_reply('WRONGTYPE ' .. KEYS[3] .. ' holds a ' .. queue .. ', not a queue of waiters')
  end
  return kind
end

-- add_holder appends owner o's hold to out, if it is live, from the
-- lock's fields f; pttl is the key's. It reports whether it did.
local function add_holder(out, f, o, pttl)
  local x, left = f[o .. ':x'], pttl
  if x then left = tonumber(x) - now end
  if not (left > 0 or (not x and left == -1)) then return false end
  local min_left = 0
  if f[o .. ':m'] then min_left = math.max(tonumber(f[o .. ':m']) - now, 0) end
  local w = 0
  if f.writer == o or f.permits then w = 1 end
  out[#out + 1] = o
  out[#out + 1] = f[o .. ':i'] or ''
  out[#out + 1] = w
  out[#out + 1] = tonumber(f[o] or '0')
  out[#out + 1] = tonumber(f[o .. ':r'] or '0')
  out[#out + 1] = f[o .. ':t']
  out[#out + 1] = left
  out[#out + 1] = min_left
  return true
end

-- add_holders appends the lock's live holds to out and sets its number
-- of permits and of holders.
local function add_holders(out)
  local h = redis.call('HGETALL', key)
  local f, owners = {}, {}
  for i = 1, #h, 2 do
    f[h[i]] = h[i + 1]
    if string.sub(h[i], -2) == ':t' then owners[#owners + 1] = string.sub(h[i], 1, -3) end
  end
  local pttl = redis.call('PTTL', key)
  local n = 0
  for _, o in ipairs(owners) do
    if add_holder(out, f, o, pttl) then n = n + 1 end
  end
  out[2] = tonumber(f.permits or '0')
  out[3] = n
end

local kind, err = check_types()
if not kind then return err end
local counter, bad = counter_of(KEYS[2])
if counter == nil then return bad end
local out = {counter or '', 0, 0}
if kind == 'hash' then add_holders(out) end

local waiting = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES')
out[#out + 1] = #waiting / 2
for i = 1, #waiting, 2 do
  out[#out + 1] = waiting[i]
  out[#out + 1] = tonumber(waiting[i + 1]) - now
end

if ARGV[1] == 'release' and kind == 'hash' then
  redis.call('DEL', key)
  local next = waiting[1] and string.match(waiting[1], '^%S+') or ''
  redis.call(PUBLISH, channel_of(key), 'free ' .. next)
end
return out
