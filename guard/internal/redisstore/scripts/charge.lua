-- charge.lua: spend from a budget that refills after a fixed window.
-- KEYS[1] the budget (a string: the amount spent in its window)
-- ARGV[1] amount to spend (>= 0), ARGV[2] limit, ARGV[3] window ms
-- Returns {1, ms until the window ends} when spent, {0, ms until the window
-- ends} when the amount would take the budget past the limit (nothing is
-- spent then). A window starts with the first spend after the last one
-- ended.
local got = redis.pcall('GET', KEYS[1])
if failed(got) then return wrong_type(KEYS[1], 'a budget') end
local spent = got and tonumber(got)
if got and not spent then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a budget (holds ' .. string.sub(got, 1, 32) .. ')')
end
local amount, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if (spent or 0) + amount > limit then
  return {0, math.max(redis.call('PTTL', KEYS[1]), 0)}
end
if not spent then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  return {1, tonumber(ARGV[3])}
end
redis.call('INCRBY', KEYS[1], ARGV[1])
return {1, math.max(redis.call('PTTL', KEYS[1]), 0)}
