-- release.lua: gives back the concurrency slots of one holder
-- (limitstore.Leaser.Release), as one atomic step. Sent alone.
--
-- KEYS[1]  the identity's lease set (see acquire.lua)
-- ARGV[1]  the holder's token
-- ARGV[2]  cost: the slots it took
-- ARGV[3]  now in Unix ms; 0: the server's TIME
--
-- Reply: 1 when the holder's slots were still held (their deadline after
-- now), else 0. Only the holder's own members are removed: a second
-- release, a release after the lease expired (its members were dropped, or
-- are past their deadline and free already) and a release with another
-- token remove nothing anyone else holds. The key's time to live is left
-- as it is (Redis deletes the key with its last member).
--
-- By hand: EVAL "$(cat release.lua)" 1 q:{t}:c <32 hex> 1 0

local call = redis.call
local k, tok = KEYS[1], ARGV[1]
local cost, now = tonumber(ARGV[2]), tonumber(ARGV[3])
local s = call('ZSCORE', k, tok .. '#1')
if not s then
  return 0
end
if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
for i = 1, cost do
  call('ZREM', k, tok .. '#' .. i)
end
if tonumber(s) > now then
  return 1
end
return 0
