-- Shared by set.lua and del.lua (prepended to each).
--
-- Tokens travel and are stored as decimal strings of positive integers
-- without leading zeros, and are compared as such: Lua's numbers are
-- doubles, exact only up to 2^53.

-- below reports whether token a is lower than token b.
local function below(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end

-- last returns the token stored at key, or nil if there is none.
local function last(key)
  local t = redis.call('GET', key)
  if not t then
    return nil
  end
  if not string.match(t, '^[1-9][0-9]*$') then
    return redis.error_reply('fence: ' .. key .. ' holds ' .. t .. ', not a fencing token')
  end
  return t
end

-- keep stores token at key for at least ms milliseconds, or for good when
-- ms is -1 (as PTTL reports a key without expiry) or the key has no expiry
-- now; a TTL it has is never shortened.
local function keep(key, token, ms)
  local now = redis.call('PTTL', key)
  if now == -1 or ms == -1 then
    redis.call('SET', key, token)
  else
    redis.call('SET', key, token, 'PX', math.max(now, ms, 1))
  end
end
