-- block.lua: one decision of quotagate's Redis store (redisstore) for an
-- Op with a block rule (limitstore.Op.Block, Policy.BlockFor), its Peek,
-- or the Refund of a charge the rule keeps unsettled (a lease).
-- The store sends it after prelude.lua (block.go), whose general path
-- decides the quotas; it is never batched (one EVALSHA per decision).
--
-- The block record is read with the states, in the same MGET: while its
-- block is in force nothing is decided and nothing is written (the Op is
-- denied); otherwise the quotas decide as take.lua's general path does, and
-- when they deny while no charge is unsettled (below), a block begins now
-- and the record is written: ForMS long, or, while the previous offence
-- is remembered (now < until + MaxMS, MaxMS > 0), twice the previous
-- block, at least ForMS and at most MaxMS (limitstore.Op.ApplyBlock).
--
-- With a lease (LeaseMS > 0: a policy that counts by status), the
-- identity's unsettled charges are a record of their own, read in the
-- same MGET: an admitted Op adds one, counted in its lease period
-- (now / LeaseMS, floored), and writes the record; a Refund gives its
-- cost back to the quotas (take.lua's refund) and settles one charge of
-- the period it names; a denial begins no block while a charge of the
-- current or the previous period is unsettled
-- (limitstore.BlockState.Unsettled).
--
-- KEYS     the quotas' keys, in the Op's order, then the block record's
--          key, then with a lease the unsettled charges' key (one Cluster
--          hash tag)
-- ARGV[1]  the Op, as take.lua's ARGV[1] (a refund only with a lease)
-- ARGV[2]  five little-endian signed 64-bit integers: ForMS, MaxMS,
--          1 for a Peek (nothing written) else 0, LeaseMS (0: none), and
--          for a refund the lease period of the charge it settles
--
-- Block record: two little-endian 64-bit integers (16 bytes), until (Unix
-- ms: the block ends) and last (its length, ms); the key's deadline is
-- until + MaxMS (the offence forgotten), set with SET ... PXAT (PX with a
-- caller's clock) at each write. Any other value is no record.
--
-- Unsettled charges: three little-endian 64-bit integers (24 bytes),
-- lease (a period), pending (its charges), prev (those of period lease -
-- 1); the key's deadline is the end of period lease + 1, set with SET ...
-- PXAT (PX) when a charge is added; a settle overwrites the value in
-- place (SETRANGE), keeping the deadline (given back when lost, as
-- take.lua's refund does). Any other value is none.
--
-- Reply: one bulk string: now as a little-endian 64-bit integer, negated
-- when the Op is denied (never for a Peek or a refund), then every quota's
-- value read (48 bytes, as take.lua's general path's), then the block
-- record read (16 bytes; 16 zero bytes for none), then with a lease the
-- unsettled charges read (24 bytes; zeros for none). The store decodes the
-- states with the scripts' rule and runs limitstore.Op.ApplyBlock on them,
-- which must admit exactly when the script did.
--
-- By hand: cat stores/redis/lua/prelude.lua stores/redis/lua/block.lua >
-- /tmp/block.lua; ARGV must be packed (see take.lua's x8).

local a = ARGV[1]
local bfor, bmax, peek, lms, rlease = sunpack('<i8i8i8i8i8', ARGV[2])
local n = #K - 1
if lms > 0 then
  n = #K - 2
end
local refund = #a > 16 + 32 * n
local clock, general = library(call, floor, byte, sunpack, spack, K)
local now, cost = sunpack('<i8i8', a)
now, servertime, tnow = clock(now, tnow)

-- The values, the quotas' and the records'; a key with no string value is
-- read again with GET, so that a key of another type is a WRONGTYPE error
-- before anything is written.
local vals = call('MGET', unpack(K))
for i = 1, #K do
  if not vals[i] then
    vals[i] = call('GET', K[i])
  end
end
local bk, bv = K[n + 1], vals[n + 1]
local untilms, last = 0, 0
if bv and #bv == 16 then
  untilms, last = sunpack('<i8i8', bv)
end
local pk, pv = K[n + 2], vals[n + 2]
local pl, pc, pp = 0, 0, 0
if lms > 0 and pv and #pv == 24 then
  pl, pc, pp = sunpack('<i8i8i8', pv)
end
local cur = 0
if lms > 0 then
  cur = (now - now % lms) / lms
end

local ok = false
if refund then
  -- The quotas given back the cost; one charge of period rlease settled,
  -- in place (a refund never creates the record).
  ok = general(a, n, now, servertime, cost, vals)
  local settled = false
  if pv and #pv == 24 then
    if rlease == pl and pc > 0 then
      pc, settled = pc - 1, true
    elseif rlease == pl - 1 and pp > 0 then
      pp, settled = pp - 1, true
    end
  end
  if settled then
    call('SETRANGE', pk, '0', spack('<i8i8i8', pl, pc, pp))
    if call('PTTL', pk) == -1 then
      if servertime then
        call('PEXPIREAT', pk, (pl + 2) * lms)
      else
        call('PEXPIRE', pk, (pl + 2) * lms - now)
      end
    end
  end
elseif untilms > now or peek == 1 then
  -- A block in force denies, deciding and writing nothing; a Peek writes
  -- nothing either (the store decides it on the values read).
  ok = peek == 1
else
  ok = general(a, n, now, servertime, cost, vals)
  if ok and lms > 0 then
    -- The charge, unsettled in its lease period (the stored one when it
    -- is ahead: a clock stepped back).
    if pl >= cur then
      pc = pc + 1
    elseif pl == cur - 1 then
      pl, pc, pp = cur, 1, pc
    else
      pl, pc, pp = cur, 1, 0
    end
    local val = spack('<i8i8i8', pl, pc, pp)
    if servertime then
      call('SET', pk, val, 'PXAT', (pl + 2) * lms)
    else
      call('SET', pk, val, 'PX', (pl + 2) * lms - now)
    end
  end
  local unsettled = 0
  if lms > 0 then
    if pl >= cur then
      unsettled = pc + pp
    elseif pl == cur - 1 then
      unsettled = pc
    end
  end
  if not ok and unsettled <= 0 then
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
if lms > 0 then
  if pv and #pv == 24 then
    parts[n + 3] = pv
  else
    parts[n + 3] = string.rep('\0', 24)
  end
end
return table.concat(parts)
