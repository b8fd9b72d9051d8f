-- write_fence.lua: write the fencing token a quorum handed out (NewQuorum)
-- back to a master whose counter differs, so that a majority, and in the end
-- every master, holds it: any later majority then includes a master whose
-- acquire.lua mints a larger one, and claim_fenced.lua finds it the newest.
-- KEYS[1] fencing counter, KEYS[2] lock hash
-- ARGV[1] token (digits, no leading zeros), ARGV[2] FenceTTL ms (0: the
-- counter is permanent, as acquire.lua makes it), ARGV[3] TTL ms,
-- ARGV[4] the token this master minted in the same attempt, '0' if none,
-- ARGV[5] the owner: its hold on this master records the token too, so
-- every master's hash names the token the holder was handed (Inspect)
-- A lower counter is raised to the token. A higher one is left alone unless
-- it is this master's own mint of the same attempt, never handed out (it
-- granted the hold after a majority had decided on a smaller token): then
-- it comes down to the token, since nothing was minted after it.
-- Returns 1: the counter holds at least the token afterwards.
-- It uses none of the prelude's helpers.
local last = redis.pcall('GET', KEYS[1])
if type(last) == 'table' and last.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. redis.call('TYPE', KEYS[1])['ok'] .. ', not a fencing counter')
end
local token = ARGV[1]
local field = ARGV[5] .. ':t'
if redis.call('HEXISTS', KEYS[2], field) == 1 then redis.call('HSET', KEYS[2], field, token) end
if last then
  local counter = string.match(last, '^0*(%d+)$')
  if not counter then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a fencing counter (holds ' .. string.sub(last, 1, 32) .. ')')
  end
  if counter == token then return 1 end
  local higher = #counter > #token or (#counter == #token and counter > token)
  if higher and counter ~= ARGV[4] then return 1 end
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
