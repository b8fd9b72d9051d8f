-- release_claim.lua: claim_fenced.lua, then set_counts.lua, in one request:
-- a holder's result stored beside the lock, fenced by its token, and its
-- hold's counts set (a final release, for Locker.WithClaim).
-- KEYS[1] the claim, KEYS[2..] set_counts.lua's KEYS, whose last, the
-- fencing counter, is claim_fenced.lua's KEYS[1] (sent once: each key costs
-- the server a string and a slot in KEYS)
-- ARGV[1..3] claim_fenced.lua's ARGV (token, value, TTL ms), ARGV[4..]
-- set_counts.lua's ARGV
-- claim_fenced.lua and set_counts.lua are this script's functions
-- claim_fenced and set_counts (newScripts wraps them).
-- Returns {set_counts.lua's reply, claim_fenced.lua's reply}: the release's
-- outcome and the fencing counter (the value was stored if and only if it
-- is ARGV[1]); or {outcome, -1, message} when the value was not stored
-- because the counter or the claim holds another type (the message, a
-- WRONGTYPE error's, names the key): the release applies all the same.
-- An error reply when set_counts.lua answers one. A claim that already
-- holds the value (a retry whose first try applied) counts as stored.
-- The claim goes first: a release that grants the key to a waiter mints a
-- newer token, which the claim's check would then find.
-- A retry whose first try stored the value, and then granted the key to a
-- waiter (a newer token), finds the claim holding it: stored, by this
-- holder, whatever the counter says now. The claim is read only then: in
-- the common case the counter holds the token, and claim_fenced stores.
local counter = claim_fenced({KEYS[#KEYS], KEYS[1]}, {ARGV[1], ARGV[2], ARGV[3]})
if counter ~= tonumber(ARGV[1]) and redis.pcall('GET', KEYS[1]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  counter = tonumber(ARGV[1])
end
local outcome = set_counts({unpack(KEYS, 2)}, {unpack(ARGV, 4)})
if failed(outcome) then return outcome end
if failed(counter) then return {outcome, -1, counter.err} end
return {outcome, counter}
