-- block.lua: one decision of quotagate's Redis store (redisstore) for an
-- Op with a block rule (limitstore.Op.Block, Policy.BlockFor), or its Peek.
-- The store sends it after prelude.lua (block.go), whose general path
-- decides the quotas; it is never batched (one EVALSHA per decision).
--
-- The block record is read with the states, in the same MGET: while its
-- block is in force nothing is decided and nothing is written (the Op is
-- denied); otherwise the quotas decide as take.lua's general path does, and
-- when they deny, a block begins now and the record is written: ForMS
-- long, or, while the previous offence is remembered (now < until +
-- MaxMS, MaxMS > 0), twice the previous block, at least ForMS and at most
-- MaxMS (limitstore.Op.ApplyBlock).
--
-- KEYS     the quotas' keys, in the Op's order, then the block record's
--          key (one Cluster hash tag)
-- ARGV[1]  the Op, as take.lua's ARGV[1] (never a refund)
-- ARGV[2]  three little-endian signed 64-bit integers: ForMS, MaxMS, and
--          1 for a Peek (nothing written), else 0
--
-- Block record: two little-endian 64-bit integers (16 bytes), until (Unix
-- ms: the block ends) and last (its length, ms); the key's deadline is
-- until + MaxMS (the offence forgotten), set with SET ... PXAT (PX with a
-- caller's clock) at each write. Any other value is no record.
--
-- Reply: one bulk string: now as a little-endian 64-bit integer, negated
-- when the Op is denied (never for a Peek), then every quota's value read
-- (48 bytes, as take.lua's general path's), then the block record read (16
-- bytes; 16 zero bytes for none). The store decodes the states with the
-- scripts' rule and runs limitstore.Op.ApplyBlock on them, which must
-- admit exactly when the script did.
--
-- By hand: cat stores/redis/lua/prelude.lua stores/redis/lua/block.lua >
-- /tmp/block.lua; ARGV must be packed (see take.lua's x8).

local n = #K - 1
local a = ARGV[1]
local bfor, bmax, peek = sunpack('<i8i8i8', ARGV[2])
local clock, general = library(call, floor, byte, sunpack, spack, K)
local now, cost = sunpack('<i8i8', a)
now, servertime, tnow = clock(now, tnow)

-- The values, the quotas' and the record's; a key with no string value is
-- read again with GET, so that a key of another type is a WRONGTYPE error
-- before anything is written.
local vals = call('MGET', unpack(K))
for i = 1, n + 1 do
  if not vals[i] then
    vals[i] = call('GET', K[i])
  end
end
local bk, bv = K[n + 1], vals[n + 1]
local untilms, last = 0, 0
if bv and #bv == 16 then
  untilms, last = sunpack('<i8i8', bv)
end

local ok = false
if untilms > now or peek == 1 then
  -- A block in force denies, deciding and writing nothing; a Peek writes
  -- nothing either (the store decides it on the values read).
  ok = peek == 1
else
  ok = general(a, n, now, servertime, cost, vals)
  if not ok then
    local d = bfor
    if bmax > 0 and last > 0 and now < untilms + bmax then
      d = 2 * last
      if d < bfor then
        d = bfor
      end
      if d > bmax then
        d = bmax
      end
    end
    local val = spack('<i8i8', now + d, d)
    if servertime then
      call('SET', bk, val, 'PXAT', now + d + bmax)
    else
      call('SET', bk, val, 'PX', d + bmax)
    end
  end
end

local r = now
if not ok then
  r = -now
end
local parts = {spack('<i8', r)}
for i = 1, n do
  local v = vals[i]
  if v and #v == 48 then
    parts[i + 1] = v
  elseif v and #v == 40 then
    parts[i + 1] = v .. '\0\0\0\0\0\0\0\0'
  else
    parts[i + 1] = string.rep('\0', 48)
  end
end
if bv and #bv == 16 then
  parts[n + 2] = bv
else
  parts[n + 2] = string.rep('\0', 16)
end
return table.concat(parts)
