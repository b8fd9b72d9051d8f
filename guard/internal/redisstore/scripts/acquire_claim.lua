-- acquire_claim.lua: acquire.lua, unless the claim beside the lock holds
-- another value; an acquisition binds a claim that holds none. One request
-- answers what a guarded run needs before it starts (Locker.WithClaim):
-- "here is the stored value", "busy" or "acquired and bound".
-- KEYS[1] the claim (a string, the lock's slot), KEYS[2..4] acquire.lua's
-- KEYS[1..3]
-- ARGV[1] the value to bind, ARGV[2] the binding's TTL ms, ARGV[3..]
-- acquire.lua's ARGV[1..]
-- acquire.lua is this script's function acquire (newScripts wraps it).
-- Returns {2, the claim} when the claim holds a value other than ARGV[1]:
-- nothing is acquired or changed, whoever holds the key. Otherwise
-- acquire.lua's reply; when that is acquired ({1, token}) and the claim held
-- nothing, the claim holds ARGV[1] for ARGV[2] ms from now on.
local claim = redis.pcall('GET', KEYS[1])
if failed(claim) then return wrong_type(KEYS[1], 'a claim') end
if claim and claim ~= ARGV[1] then return {2, claim} end
local reply = acquire({KEYS[2], KEYS[3], KEYS[4]}, {unpack(ARGV, 3)})
if not claim and type(reply) == 'table' and reply[1] == 1 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return reply
