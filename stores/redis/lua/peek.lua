-- peek.lua: the look of quotagate's Redis store (redisstore) at the states
-- of an Op, for limitstore.Op.Peek: it reads and writes nothing else. Sent
-- alone (it needs nothing of prelude.lua); the store decodes the states
-- with the scripts' rule (a state counts only while its expiry is after
-- now and at most 2^37 ms ahead) and runs limitstore.Op.Apply on them.
--
-- KEYS     the quotas' keys (one Cluster hash tag), in the Op's order
-- ARGV[1]  now in Unix ms, decimal (0: read the server's TIME)
--
-- Reply: an array: now (an integer), then per key its value as stored
-- (prelude.lua) when it is a 40- or 48-byte string, else the empty string
-- (absent, or not a value of the store's: no state).
--
-- By hand:  redis-cli --eval stores/redis/lua/peek.lua '{demo}k' , 0

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local vals = redis.call('MGET', unpack(KEYS))
local out = {now}
for i = 1, #KEYS do
  local v = vals[i]
  if v and (#v == 40 or #v == 48) then
    out[i + 1] = v
  else
    out[i + 1] = ''
  end
end
return out
