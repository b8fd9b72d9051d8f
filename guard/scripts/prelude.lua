-- prelude.lua: helpers prepended to every guard script.
--
-- A lock is one hash (KEYS[1], "<prefix>{<name>}"):
--   writer      owner id of the write holder (absent when only readers hold it)
--   <owner>     write hold count of <owner>
--   <owner>:r   read hold count of <owner>
--   <owner>:x   expiry of <owner>'s hold, server time in ms
--   <owner>:t   fencing token of <owner>'s hold
--   <owner>:m   MinHold: keep the hold until this server time (ms), even after release
-- The key's own PEXPIRE is always >= the latest <owner>:x, so a crashed fleet
-- leaves nothing behind; the per-owner expiry lets one crashed reader free its
-- share without waiting for the others.

if redis.replicate_commands then redis.replicate_commands() end

-- now_ms returns the server's time in ms and, second, in µs.
local function now_ms()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- int formats a number as Redis expects an integer: Lua would print a
-- token in µs (16 digits) as 1.7e+15, and '%d' casts to a C long, which is
-- 32 bits on some builds.
local function int(n)
  return string.format('%.0f', n)
end

local function drop_owner(key, o)
  redis.call('HDEL', key, o, o .. ':r', o .. ':x', o .. ':t', o .. ':m')
end

-- sweep removes owners whose expiry has passed on the server's clock and
-- returns the number of live owners, the latest expiry and the writer.
local function sweep(key, now)
  local h = redis.call('HGETALL', key)
  local owners, latest, writer, dead = 0, 0, false, {}
  for i = 1, #h, 2 do
    local f = h[i]
    if f == 'writer' then
      writer = h[i + 1]
    elseif string.sub(f, -2) == ':x' then
      local o, x = string.sub(f, 1, -3), tonumber(h[i + 1])
      if x <= now then
        dead[o] = true
      else
        owners = owners + 1
        if x > latest then latest = x end
      end
    end
  end
  for o in pairs(dead) do drop_owner(key, o) end
  if writer and dead[writer] then
    redis.call('HDEL', key, 'writer')
    writer = false
  end
  if owners == 0 then redis.call('DEL', key) end
  return owners, latest, writer
end

local function extend_key(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
