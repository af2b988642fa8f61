-- batch.lua: a flight of several Ops of quotagate's Redis store
-- (redisstore), decided one after the other in one call (group commit).
--
-- The store sends it after prelude.lua (scripts.go). Each Op is decided
-- exactly as take.lua decides it (prelude.lua's steps), in the Ops' order,
-- and an Op reads what the Ops before it in the flight wrote, as it would
-- one call later. So the decisions are those of the same Ops sent one by
-- one.
--
-- KEYS     the flight's keys, each once, in order of first use
-- ARGV[2..] the flight's distinct arguments (take.lua's ARGV[1]), each once,
--          except that a window Op of one quota (no refund) is sent without
--          its phase (the last 8 bytes: 40 bytes), its phase going into its
--          head
-- ARGV[1]  the Ops' heads, one after the other, 6 + n bytes each: a byte n
--          (the Op's quotas; plus 128, "again", for an Op of one quota
--          whose key a later Op reads), a byte: the index in ARGV of its
--          argument, n bytes: the index in KEYS of each quota's key, and
--          4 bytes: that phase (little-endian; 0 for the others)
--
-- Redis makes a Lua string of every key and argument before the script
-- runs, and the Ops of a flight usually share a policy, whose window Ops
-- differ only in their phase (a hash of the identity): so each argument is
-- sent, stored and decoded once.
--
-- Reply: one bulk string: a byte m, then m pairs of bytes for the Ops not
-- admitted, in order (the Op's index from 0, and 1: denied or 2: failed),
-- then tnow as a little-endian 64-bit integer (0: no Op read TIME), then
-- per Op the values its quotas read, 48 bytes each (a 40-byte value and 8
-- zero bytes, 48 zero bytes for none: take.lua's general path's states,
-- also for one quota), or for a failed Op the length of its error message
-- (little-endian 16-bit) and the message. No head per
-- Op: every piece of a reply costs Redis about 700 instructions, and the
-- client knows each Op's quotas and the clock it sent; from them it
-- rebuilds take.lua's answer per Op (the clock reading, negated when
-- denied, and the states).
--
-- Values are read through got, the flight's values (index in KEYS ->
-- value; false: none), filled by one MGET; every write of a key a later Op
-- reads updates it (the head's flag again), and a key no later Op reads may
-- have its count written alone. A key MGET found no string under (none, or
-- a key of another type) is read again with GET under redis.pcall, before
-- anything of its Op is written: a WRONGTYPE key fails that Op alone (its
-- answer is the message), and the others are decided as if they had been
-- sent one by one. No other command of an Op can fail alone: a write fails
-- (OOM, READONLY) only as a script's first write, before anything was
-- written, and then the whole call fails (every Op of the flight gets the
-- error).
--
-- Shape: the straight path (one quota, no refund) runs in the reply loop,
-- in a repeat ... until true block whose break ends an Op that failed,
-- with prelude.lua's steps inline (marked copies, as in take.lua); the
-- argument it decoded last stays in the loop's locals now, cost, alg, lim,
-- w and x0 (the phase apart), kai its index, with its clock reading: an Op
-- with that argument neither decodes it nor reads the clock again, nor
-- checks it for a refund (a function holding the whole Op, copying the
-- kept argument in and out of it, would cost Redis about 1k instructions
-- per Op). The general path (several quotas, a refund) is the function
-- one, which calls prelude.lua's general (library is made by the first
-- such Op of the flight); it reads the clock of its own argument, so the
-- next Op decodes its argument again. The server's TIME is read once,
-- for the first Op on the server clock, and shared (tnow).
--
-- Every C function call and global lookup costs Redis hundreds of
-- instructions: the script reads an Op's head with one string.byte, keeps
-- globals in locals, and decodes an argument once per flight where it can.
--
-- By hand, with redis-cli --eval: ARGV[1] "ops", then one Op per
-- argument, take.lua's integers in decimal (no refunds), each Op's keys
-- the next KEYS. Four Ops of a fixed window of 3 per 60000 ms on one key:
--
--   cat stores/redis/lua/prelude.lua stores/redis/lua/batch.lua > /tmp/batch.lua
--   redis-cli --eval /tmp/batch.lua '{demo}a' '{demo}a' '{demo}a' '{demo}a' , ops \
--     '0 1 1 3 60000 0' '0 1 1 3 60000 0' '0 1 1 3 60000 0' '0 1 1 3 60000 0' | od -An -c | head -1
--
-- (the reply's first bytes: one Op not admitted, the fourth (3), denied
-- (1)). As the store sends it (see the package doc for more), with x8 as
-- in take.lua: two
-- Ops of a fixed window of 10 per 60000 ms, phase 0, cost 1, on the
-- server's clock, on the keys {demo}a and {demo}b; both heads name ARGV[2],
-- the window Ops' argument without its phase:
--
--   sha=$(cat stores/redis/lua/prelude.lua stores/redis/lua/batch.lua |
--     redis-cli -x SCRIPT LOAD)
--   heads='\x01\x02\x01\x00\x00\x00\x00\x01\x02\x02\x00\x00\x00\x00'
--   printf 'EVALSHA %s 2 {demo}a {demo}b "%s" "%s"\n' "$sha" "$heads" \
--     "$(x8 0 1 1 10 60000)" | redis-cli --no-raw

local rpcall = redis.pcall
local A = ARGV
if A[1] == 'ops' then
  -- By hand (redis-cli --eval): ARGV[1] is "ops", then one argument per Op
  -- (no refunds), take.lua's integers in decimal separated by spaces; each
  -- Op takes its quotas' keys from KEYS, in order. The heads and arguments
  -- are packed here (every Op flagged again, every key at its first index).
  local heads, args, first, nk = {}, {}, {}, 0
  for i = 1, #K do
    first[K[i]] = first[K[i]] or i
  end
  for i = 2, #A do
    local ints = {}
    for v in string.gmatch(A[i], '%S+') do
      ints[#ints + 1] = spack('<i8', tonumber(v))
    end
    local n = (#ints - 2) / 4
    local hd = { string.char(128 + n, i) }
    for _ = 1, n do
      nk = nk + 1
      hd[#hd + 1] = string.char(first[K[nk]])
    end
    heads[#heads + 1] = table.concat(hd) .. '\0\0\0\0'
    args[i] = table.concat(ints)
  end
  args[1] = table.concat(heads)
  A = args
end
-- clock and general: prelude.lua's library, made by the first Op on the
-- general path.
local clock, general
local h = A[1]
local got = call('MGET', unpack(K))
-- A small flight repairs each key's deadline on a write in place; a larger
-- one asks INFO keyspace once whether any key lacks one (prelude.lua,
-- persisted).
if #K < 8 then
  persisted = true
end
local Z = string.rep('\0', 48)

-----------------------------------------------------------------------------
-- The general path: the Op whose head is at h[at], of n quotas, its
-- argument ARGV[ai]; several quotas, or a refund (prelude.lua's general).
-- Returns whether it admitted the Op and the values read (48 bytes per
-- quota, as take.lua's general path), or nil and an error message (a key
-- of another type).
-----------------------------------------------------------------------------
local function one(n, ai, at)
  if not general then
    clock, general = library(call, floor, byte, sunpack, spack, K)
  end
  local a = A[ai]
  -- The clock: it sets servertime, so the straight path's kept argument
  -- (whose clock it was) is decoded again after this Op (kai = nil in the
  -- reply loop).
  local now, cost = sunpack('<i8i8', a)
  now, servertime, tnow = clock(now, tnow)

  -- The values, one per quota, from got; a key with no string value read
  -- again with GET under redis.pcall: a key of another type fails this Op
  -- alone, before anything of it is written.
  local vals = {}
  for i = 1, n do
    vals[i] = got[byte(h, at + 1 + i)]
  end
  for i = 1, n do
    if not vals[i] then
      local v = rpcall('GET', K[byte(h, at + 1 + i)])
      if type(v) == 'table' then
        return nil, v.err
      end
      vals[i] = v
    end
  end

  local ok = general(a, n, now, servertime, cost, vals, h, at, got)
  local parts = {}
  for i = 1, n do
    local v = vals[i]
    if v and #v == 48 then
      parts[i] = v
    elseif v and #v == 40 then
      parts[i] = v .. '\0\0\0\0\0\0\0\0'
    else
      parts[i] = Z
    end
  end
  return ok, table.concat(parts)
end

-----------------------------------------------------------------------------
-- The reply loop: one Op per head, in order. rok, rv: the Op's answer
-- (true: admitted, false: denied, nil: failed; the values read, or the
-- error message). out: the reply's parts; odd: the (index, kind) pairs of
-- the Ops not admitted, m their bytes. kai: the index in ARGV of the
-- argument the straight path decoded last, kept in now, cost, alg, lim, w
-- and x0.
-----------------------------------------------------------------------------
local out, odd = {}, {}
local p, j, e, m = 1, 1, #h, 0
local kai, now, cost, alg, lim, w, x0
while p <= e do
  -- The head: n (and again), ai, the first key's index k1 and the phase's
  -- 4 bytes q0..q3 (meaningful for one quota only).
  local n, ai, k1, q0, q1, q2, q3 = byte(h, p, p + 6)
  local again = n > 127
  if again then
    n = n - 128
  end
  local rok, rv
  if n == 1 and (ai == kai or #A[ai] <= 48) then
    -------------------------------------------------------------------------
    -- The straight path: one quota, no refund (an argument of 40 or 48
    -- bytes); break ends an Op that failed.
    -------------------------------------------------------------------------
    repeat
      if ai ~= kai then
        -- A window Op's argument comes without its phase (40 bytes: the
        -- Ops of a policy share it), the phase in the Op's head.
        local a = A[ai]
        if #a == 40 then
          now, cost, alg, lim, w = sunpack('<i8i8i8i8i8', a)
          x0 = 0
        else
          now, cost, alg, lim, w, x0 = sunpack('<i8i8i8i8i8i8', a)
        end
        -- The clock, once per flight.
        -- inline: clock begin
        servertime = now == 0
        if servertime then
          if not tnow then
            local t = call('TIME')
            local us = t[2] % 1000
            tnow = t[1] * 1000 + (t[2] - us) / 1000
          end
          now = tnow
        end
        -- inline: clock end
        kai = ai
      end
      local x = x0 + q0 + 256 * (q1 + 256 * (q2 + 256 * q3))

      local ki = k1
      local k = K[ki]

      -- The value, from got; a key MGET found no string under read again
      -- with GET under redis.pcall: a key of another type fails this Op
      -- alone (break leaves the repeat block), the flight goes on.
      local v = got[ki]
      if not v then
        v = rpcall('GET', k)
        if type(v) == 'table' then
          rok, rv = nil, v.err
          break
        end
        got[ki] = v
      end

      -- The decision; got follows the write, unless only the count was
      -- written (again unset: no later Op reads the key).
      local val
      -- inline: straight begin
      -- The state read, the new state (na, nb, nc), its ttl, the key's bound
      -- and slack; then the write, if any (val: the 40 or 48 bytes written,
      -- nil for the count alone).
      local sa, sb, sc, ex, px, ep
      -- inline: state begin
      ep = ''
      if v and (#v == 40 or #v == 48) then
        sa, sb, sc, ex, px = sunpack('<i8i8i8i8i8', v)
        if ex <= now or ex - now > 137438953472 then
          sa, sb, sc, ex = 0, 0, 0, 0
          if #v == 48 then
            ep = '\0\0\0\0\0\0\0\0'
          end
        elseif #v == 48 then
          ep = string.sub(v, 41)
        end
      else
        sa, sb, sc, ex, px = 0, 0, 0, 0, 0
      end
      -- inline: state end
      local ok, na, nb, nc, ttl, bound, slack = false, sa, sb, sc, 0, 0, 0
      if alg >= 2 then
        -- Reservations: the algorithm integer is 2 + 4*(mw + 2^22*rw), MaxWait
        -- and the Op's wait in ms (0, 0: plain 2).
        local mw, rw = 0, 0
        if alg > 2 then
          local v = (alg - 2) / 4
          mw = v % 4194304
          rw = (v - mw) / 4194304
        end
        -- inline: bucketview begin
        local tau = x * w
        local off, norm = 0, false
        if sa >= now then
          off = (sa - now) * lim + sb
          if off > tau + mw * lim then
            off, norm = tau + mw * lim, true
          end
        end
        -- inline: bucketview end
        -- inline: bucketadmits begin
        ok = cost <= x and off + cost * w <= tau + rw * lim
        -- inline: bucketadmits end
        if ok then
          off = off + cost * w
        end
        if ok or norm then
          -- inline: gcra begin
          local r = off % lim
          local q = (off - r) / lim
          if r < 0 then
            q, r = q - 1, r + lim
          elseif r >= lim then
            q, r = q + 1, r - lim
          end
          na, nb, nc = now + q, r, 0
          ttl = q
          if r > 0 then
            ttl = q + 1
          end
          if ttl < 1 then
            ttl = 1
          end
          slack = tau
          if slack > 1000 * lim then
            slack = 1000 * lim
          end
          bound = tau / lim + 1002
          -- inline: gcra end
          bound = bound + mw
        end
      else
        -- inline: windowview begin
        local rem = (now - x) % w
        local idx = ((now - x) - rem) / w
        if rem < 0 then
          idx, rem = idx - 1, rem + w
        elseif rem >= w then
          idx, rem = idx + 1, rem - w
        end
        local start, at = idx * w + x, now
        if alg < 0 then
          idx, start = x, x
        end
        local wa, norm = sa, false
        if wa > idx then
          local s2 = wa * w + x
          if alg < 0 then
            s2 = wa
          end
          if s2 - now <= 1000 then
            idx, start, at = wa, s2, s2
          else
            wa, norm = idx, true
          end
        end
        local curr, prev = 0, 0
        if wa == idx then
          curr, prev = sb, sc
        elseif wa == idx - 1 then
          prev = sb
        end
        if alg ~= 0 then
          prev = 0
        end
        -- inline: windowview end
        -- inline: windowadmits begin
        if alg ~= 0 then
          ok = cost <= lim - curr
        else
          ok = cost <= lim and prev * (w - (at - start)) + (curr + cost) * w <= lim * w
        end
        -- inline: windowadmits end
        if ok then
          curr = curr + cost
        end
        if ok or norm then
          na, nb, nc = idx, curr, prev
          -- inline: windowttl begin
          if alg ~= 0 then
            ttl = start + w - now
            if alg < 0 and ttl < 0 then
              ttl = 0
            elseif alg < 0 and ttl > w + 1000 then
              ttl = w + 1000
            end
            ttl = ttl + 1000
            bound = w + 2000
          else
            ttl = (w - (at - start)) + w + (at - now)
            bound = 2 * w + 1000
          end
          -- inline: windowttl end
        end
      end
      if ttl > 0 then
        -- inline: deadline begin
        local e = now + ttl
        local pe = px
        if e > px or px - now > bound then
          pe = e
          if slack > 0 then
            local sr = slack % lim
            local s = (slack - sr) / lim
            if sr < 0 then
              s, sr = s - 1, sr + lim
            elseif sr >= lim then
              s, sr = s + 1, sr - lim
            end
            if sr > 0 then
              s = s + 1
            end
            pe = e + s
          end
        end
        -- inline: deadline end
        -- inline: write begin
        local keep = false
        if not again and na == sa and nc == sc and e == ex and pe == px then
          call('SETRANGE', k, '8', spack('<i8', nb))
          keep = true
        else
          val = spack('<i8i8i8i8i8', na, nb, nc, e, pe)
          if ep ~= '' then
            val = val .. ep
          end
          if pe == px then
            call('SETRANGE', k, '0', val)
            keep = true
          elseif servertime then
            call('SET', k, val, 'PXAT', pe)
          else
            call('SET', k, val, 'PX', pe - now)
          end
        end
        -- A write in place keeps the key's deadline; a key that lost it
        -- (PERSIST from outside: PTTL -1) gets it back; not needed when no key
        -- lacks a deadline (persisted false).
        if keep then
          if persisted == nil then
            local info, seen, lack = redis.pcall('INFO', 'keyspace'), false, false
            if type(info) == 'string' then
              for nk, ne in string.gmatch(info, 'keys=(%d+),expires=(%d+)') do
                seen, lack = true, lack or nk ~= ne
              end
            end
            persisted = lack or not seen
          end
          if persisted and call('PTTL', k) == -1 then
            if servertime then
              call('PEXPIREAT', k, pe)
            else
              call('PEXPIRE', k, pe - now)
            end
          end
        end
        -- inline: write end
      end
      -- inline: straight end
      if val then
        got[ki] = val
      end

      rok, rv = ok, Z
      if v and #v == 40 then
        rv = v .. '\0\0\0\0\0\0\0\0'
      elseif v and #v == 48 then
        rv = v
      end
    until true
  else
    rok, rv = one(n, ai, p)
    kai = nil
  end
  if not rok then
    -- Denied (1), or failed (2: its message after a 16-bit length).
    local kind = 1
    if rok == nil then
      rv = string.sub(tostring(rv), 1, 65535)
      rv = string.char(#rv % 256, floor(#rv / 256)) .. rv
      kind = 2
    end
    odd[m + 1], odd[m + 2] = j - 1, kind
    m = m + 2
  end
  j = j + 1
  out[j] = rv
  p = p + 6 + n
end
out[1] = string.char(m / 2, unpack(odd)) .. spack('<i8', tnow or 0)
return table.concat(out)
