-- raise_fence.lua: raise a fencing counter to at least a token. NewQuorum
-- writes the token it hands out back to the masters whose counter is lower,
-- so that any later majority includes a master that knows it.
-- KEYS[1] fencing counter
-- ARGV[1] token (digits, no leading zeros), ARGV[2] FenceTTL ms (0: the
-- counter is permanent, as acquire.lua makes it), ARGV[3] TTL ms
-- Returns 1 when the counter holds at least the token afterwards.
-- Self-contained (no prelude): it runs by hash, outside the function library.
local last = redis.pcall('GET', KEYS[1])
if type(last) == 'table' and last.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a fencing counter (' .. last.err .. ')')
end
local token = ARGV[1]
if last then
  local counter = string.match(last, '^0*(%d+)$')
  if not counter then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a fencing counter (holds ' .. string.sub(last, 1, 32) .. ')')
  end
  if #counter > #token or (#counter == #token and counter >= token) then
    return 1
  end
end
if ARGV[2] == '0' then
  redis.call('SET', KEYS[1], token) -- permanent, as acquire.lua makes it
elseif last then
  -- acquire.lua has just set this counter's expiry (or kept it permanent)
  redis.call('SET', KEYS[1], token, 'KEEPTTL')
else
  redis.call('SET', KEYS[1], token, 'PX', math.max(tonumber(ARGV[2]), tonumber(ARGV[3])))
end
return 1
