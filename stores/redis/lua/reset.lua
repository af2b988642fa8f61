-- reset.lua: the Reset of quotagate's Redis store (redisstore), for
-- limitstore.Resetter: it forgets an identity's records and moves each of
-- its live states to the next epoch, in one atomic step. Sent alone (it
-- needs nothing of prelude.lua, whose stored value it writes).
--
-- A charge taken before the Reset and given back after it (a refund,
-- carrying the epoch of the state it was charged in) must give nothing
-- back to the identity's new usage, so a live state is not deleted: it is
-- replaced by the empty state of the next epoch, 48 bytes (prelude.lua's
-- five integers, all zero but its expiry and the key's deadline, which it
-- keeps, then the epoch: one more than the state's, 0 for a value of 40
-- bytes), written in place (SETRANGE keeps the key's deadline; a key that
-- lost it, PTTL -1, gets it back, as prelude.lua's writes in place do).
-- Anything else is deleted:
-- a dead state (its epoch dies with it), a block record (the zero record
-- is none), a value the store did not write, a key of another type.
--
-- KEYS     the identity's keys (one Cluster hash tag)
-- ARGV[1]  now in Unix ms, decimal (0: read the server's TIME)
--
-- Reply: the number of states moved to the next epoch.
--
-- By hand:  redis-cli --eval stores/redis/lua/reset.lua '{demo}k' , 0

local now = tonumber(ARGV[1])
local servertime = now == 0
if servertime then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- le64 is the little-endian signed 64-bit integer at byte p of s (plain
-- Lua: miniredis has no struct library; exact below 2^53 in magnitude).
local function le64(s, p)
  local v = string.byte(s, p + 7)
  if v > 127 then
    v = v - 256
  end
  for b = p + 6, p, -1 do
    v = v * 256 + string.byte(s, b)
  end
  return v
end

-- pack is the 8 little-endian bytes of the non-negative integer v.
local function pack(v)
  local bytes = {}
  for b = 1, 8 do
    local r = v % 256
    bytes[b] = string.char(r)
    v = (v - r) / 256
  end
  return table.concat(bytes)
end

local moved = 0
for i = 1, #KEYS do
  local k = KEYS[i]
  local v = redis.pcall('GET', k)
  local live = false
  if type(v) == 'string' and (#v == 40 or #v == 48) then
    local ex, px = le64(v, 25), le64(v, 33)
    -- A live state: the scripts' rule (prelude.lua, state).
    if ex > now and ex - now <= 137438953472 and px > now then
      local ep = 0
      if #v == 48 then
        ep = le64(v, 41)
      end
      redis.call('SETRANGE', k, '0', string.rep('\0', 24) .. pack(ex) .. pack(px) .. pack(ep + 1))
      if redis.call('PTTL', k) == -1 then
        if servertime then
          redis.call('PEXPIREAT', k, px)
        else
          redis.call('PEXPIRE', k, px - now)
        end
      end
      live, moved = true, moved + 1
    end
  end
  if not live and v then -- absent (false): nothing to delete
    redis.call('DEL', k)
  end
end
return moved
