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
-- A claim that holds nothing (a fresh key, the common case) is bound and
-- read in one command, SET NX with GET (Redis 7.0 and later), and unbound
-- again when the acquisition does not take the key, whether it answers
-- busy or an error, or raises one: nothing else runs between the two, so
-- no other request sees the binding. A SET refused for another reason than
-- the key's type (NX with GET is a syntax error before 7.0) falls back to
-- GET, and the binding to a SET once acquired; a server that answers the
-- SET without the GET (a status) has bound the claim.
local claim = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
local bound = false
if failed(claim) then
  if string.sub(claim.err, 1, 9) == 'WRONGTYPE' then return wrong_type(KEYS[1], 'a claim') end
  claim = redis.pcall('GET', KEYS[1])
  if failed(claim) then return wrong_type(KEYS[1], 'a claim') end
elseif type(claim) == 'table' then
  claim, bound = false, true
else
  bound = not claim
end
if claim and claim ~= ARGV[1] then return {2, claim} end
local ok, reply = pcall(acquire, {KEYS[2], KEYS[3], KEYS[4]}, {unpack(ARGV, 3)})
local acquired = ok and type(reply) == 'table' and reply[1] == 1
if bound and not acquired then
  redis.call('DEL', KEYS[1])
elseif not claim and not bound and acquired then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if not ok then return reraise(reply) end
return reply
