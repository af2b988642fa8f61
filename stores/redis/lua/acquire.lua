-- acquire.lua: takes, or renews, the concurrency slots of one holder
-- (limitstore.Leaser.Acquire), as one atomic step. Sent alone (no
-- prelude): it shares nothing with the rate scripts.
--
-- KEYS[1]  the identity's lease set: a sorted set whose members are the
--          holders' slots, "<token>#<i>" for the i-th slot of a holder
--          taking several, scored by the lease's deadline (Unix ms). All
--          of an identity's slots are this one key: one Cluster slot.
-- ARGV[1]  the holder's token (32 hex digits, unique per held request)
-- ARGV[2]  cost: the slots the holder takes, 1..limit
-- ARGV[3]  limit: the slots the identity may hold at once
-- ARGV[4]  lease in ms
-- ARGV[5]  now in Unix ms; 0: the server's TIME
--
-- Reply: {allowed (1 or 0), slots held after the call, now}.
--
-- Leases whose deadline is at or before now are dropped first: a killed
-- process's slots count until their deadline and no longer. A holder that
-- is still there (its first slot is a member) renews: its slots' deadline
-- moves to now + lease, whatever the count. Otherwise the slots are added
-- when they fit the limit, and nothing is written when they do not. Every
-- write sets the key's time to live to lease + 1 s: every deadline it
-- holds is at most now + lease, so the key outlives each of its leases by
-- at least 1 s and a vanished identity's key dies with its last lease.
--
-- By hand: EVAL "$(cat acquire.lua)" 1 q:{t}:c <32 hex> 1 10 10000 0

local call = redis.call
local k, tok = KEYS[1], ARGV[1]
local cost, limit, lease, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
call('ZREMRANGEBYSCORE', k, '-inf', now)
local held = call('ZCARD', k)
local deadline = now + lease
if call('ZSCORE', k, tok .. '#1') then
  for i = 1, cost do
    call('ZADD', k, 'XX', deadline, tok .. '#' .. i)
  end
elseif cost < 1 or held + cost > limit then
  return {0, held, now}
else
  for i = 1, cost do
    call('ZADD', k, deadline, tok .. '#' .. i)
  end
  held = held + cost
end
call('PEXPIRE', k, lease + 1000)
return {1, held, now}
