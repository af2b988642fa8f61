-- prelude.lua: what the two scripts of quotagate's Redis store (redisstore)
-- share. The store never sends it alone: the script of one decision is this
-- file followed by take.lua, the script of a flight this file followed by
-- batch.lua (scripts.go joins them once, at init), so a change here is a
-- change of both, and error line numbers count from this file's first line.
--
-- It transcribes line by line the admission test and the state updates of
-- limitstore.Op.Apply (engine/limitstore/algorithm.go), refunds and the
-- clock-step rules, plus the memory store's expiry rule (a stored state
-- counts only while its expiry is after now), one function per step, made
-- by library (below). Only what the store contract says is written: every
-- state of an admitted Op; for a denial nothing but a state the clock has
-- fallen far behind; for a refund the changed states, keeping their expiry.
-- The numbers of the answer (Remaining, delays, TTLs) are not computed
-- here: the scripts return the states they read and the store runs
-- limitstore.Op.Apply on them, the very function the memory store runs, and
-- checks that Apply admits exactly when the script did.
--
-- Stored value: five little-endian 64-bit integers (40 bytes) a, b, c,
-- expiry, pexpiry, and for a key a Reset found live (reset.lua) a sixth,
-- its epoch (48 bytes; a 40-byte value is of epoch 0, as every value
-- written before epochs existed). Window algorithms: a = window index, b =
-- count, c = previous count; token bucket: a = TAT (Unix ms), b = TAT's
-- fraction in 1/limit ms. Every write keeps the epoch of a live state (a
-- write in place leaves its 8 bytes alone, a rewrite appends them; a
-- rewrite over a dead state writes epoch 0), and a refund whose epoch is
-- not the state's gives nothing back (limitstore.Op.Apply). expiry is the Unix ms at which the state dies (now + the
-- Result's TTLMS at its last write: the memory store's rule, so both stores
-- forget a state at the same instant whatever the clock does); pexpiry is
-- the key's own deadline in Redis. A write sets the key's deadline only
-- when the state would outlive it (SET ... PXAT, or PX with a caller's
-- clock), and otherwise keeps it by overwriting the 40 bytes in place
-- (SETRANGE key 0: the key exists and holds 40 bytes, or the deadline read
-- would be 0), which costs Redis far less, and less than SET ... KEEPTTL;
-- when only the count b changed (a window's next admission, nearly every
-- write) only its 8 bytes (SETRANGE key 8): packing one integer costs Redis
-- 1.2k instructions, five 3.3k. Window algorithms set the deadline to the
-- state's expiry (once per window and key); a token bucket to its expiry
-- (the time until the bucket is full) plus a slack of its refill time, at
-- most 1 s (the grace a fixed window's key gets), so that a busy key moves
-- its deadline at most once a second. A write in place also asks PTTL,
-- a read, and when it says -1 (something removed the deadline: PERSIST)
-- sends PEXPIREAT (PEXPIRE with a caller's clock) to give it back; not
-- PEXPIREAT ... NX, which costs Redis more per write and needs Redis 7.0.
-- A flight of 8 keys or more asks INFO keyspace once instead, and skips
-- the PTTLs when no key of the server lacks a deadline (persisted,
-- below). A key thus always has a deadline after any write, never
-- before its state dies and never further than the policy's bound
-- (DESIGN.md, "Store keys"). A value that does not decode is no state (the next write
-- replaces it and sets a deadline); a key of another type is a WRONGTYPE
-- error, never silently deleted: MGET reads such a key as none, so a key
-- without a value is read again with GET (which raises WRONGTYPE) before
-- anything is written.
--
-- Arithmetic: Lua numbers are IEEE doubles; limit.New keeps every integer
-- below 2^53, so sums, products and comparisons are exact. Floor division
-- is spelled out as a % b corrected by the remainder (a/b alone can round
-- up to the next integer), not math.floor. Values are non-negative (times
-- after 1970).
--
-- Cost: in Redis's Lua every C function call (struct.unpack, string.byte,
-- math.floor, redis.call) costs a few hundred instructions and a global
-- lookup about a hundred (callgrind, DESIGN.md "The script's own cost"), so
-- the scripts keep globals in locals, make as few C calls as they can, and
-- pass SETRANGE's offset as a string ('0'; a number argument costs Redis a
-- snprintf per call).
--
-- Shape: the general path (several quotas, or a refund: rare) calls the
-- functions library makes. The straight path (one quota, no refund: nearly
-- every call; take.lua's, and batch.lua's per Op) runs the same steps
-- inline, because the calls cost Redis more than the steps (callgrind,
-- bench/README.md "Measuring the Lua script's cost"; Redis 7.0, inside
-- EVALSHA). take.lua would have to make the functions in every call:
-- library with its closures and their upvalues costs 11.7k instructions, a
-- third more than the 31.5k of a whole decision, before any call; calling
-- every step, 16.5k. In batch.lua (18.3k per Op in flights of 64) a call
-- per Op costs 0.5k to 1k instructions a step (2.5 to 5.4%), 4.9k for all
-- of them, and making the functions about 17k per flight.
--
-- So each step's body is marked "-- inline: NAME begin" and
-- "-- inline: NAME end" in library's function NAME, and each inline copy
-- is marked so too; the straight path itself, the same in both scripts, is
-- a marked block "straight" of take.lua, copied in batch.lua.
-- TestInlineCopies fails when a copy differs from its original (the
-- indentation aside), and go test -run TestInlineCopies -update rewrites
-- the copies from the originals: change a step here (or the straight path
-- in take.lua), then update. library has no upvalues, so defining it costs
-- a call a few hundred instructions; the functions it makes exist only
-- where the general path runs.

-- codec: the integers' packing.
--
-- Binary packing through the struct library of the server's Lua (Redis,
-- Valkey) is what makes the script cheap: six decimal arguments and a
-- decimal value parsed with string.match cost Redis several microseconds
-- more per call. Where the Lua has no struct library (miniredis), the same
-- bytes are packed and unpacked by the plain Lua below.
local struct = rawget(_G, 'struct')
local call, floor, byte = redis.call, math.floor, string.byte
local sunpack, spack
if struct then
  sunpack, spack = struct.unpack, struct.pack
else
  -- No struct library: struct.unpack and struct.pack of the formats used
  -- here ('<' and k times 'i8': little-endian 64-bit integers, signed) in
  -- plain Lua. The top byte carries the sign (a value written by something
  -- else may be negative): exact below 2^53 in magnitude, as struct's.
  sunpack = function(fmt, s, p)
    p = p or 1
    local k = (#fmt - 1) / 2
    local out = {}
    for j = 1, k do
      local v = string.byte(s, p + 7)
      if v > 127 then
        v = v - 256
      end
      for b = p + 6, p, -1 do
        v = v * 256 + string.byte(s, b)
      end
      out[j] = v
      p = p + 8
    end
    out[k + 1] = p
    return unpack(out)
  end
  spack = function(fmt, ...)
    local parts = {}
    for j, v in ipairs({...}) do
      local bytes = {}
      for b = 1, 8 do
        local r = v % 256
        bytes[b] = string.char(r)
        v = (v - r) / 256
      end
      parts[j] = table.concat(bytes)
    end
    return table.concat(parts)
  end
end

local K = KEYS

-- servertime: the current Op's now is the server's TIME (writes use PXAT,
-- else PX); tnow: TIME's reading, once per script call (take.lua: the
-- call's one Op; batch.lua: the flight).
local servertime, tnow

-- persisted: whether a write in place must check its key's deadline (PTTL)
-- and give it back (PEXPIREAT), the repair of a key that lost it (PERSIST
-- from outside). nil: not known yet; the first write in place of the call asks
-- INFO keyspace once: when every key of every database has a deadline
-- (keys = expires), no key lacks one, and the writes in place of the call
-- need no repair (false); else, or when INFO says nothing of the kind (a
-- server without it), each repairs its key (true). A PTTL per write in
-- place costs Redis about 4.5k instructions, INFO about as much as four or
-- five: take.lua (one Op) and a small flight set true (the repair per
-- write), a flight of 8 keys or more leaves it to INFO. The general path's
-- writes always repair.
local persisted

-- library makes the functions of the algorithm's steps, as the general path
-- calls them, and returns clock and general (below). It takes what they use
-- of the codec's locals as arguments, so that it has no upvalues itself.
local function library(call, floor, byte, sunpack, spack, K)
  -- clock: an Op's now, the caller's clock or, when the caller sent none
  -- (now 0), the server's TIME, read once (tnow); servertime says which.
  -- TIME's two strings (seconds, microseconds) become milliseconds by Lua's
  -- own arithmetic, which converts them: no tonumber or math.floor, each a
  -- C call.
  local function clock(now, tnow)
    local servertime
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
    return now, servertime, tnow
  end

  -- state: the state read from the value v: sa, sb, sc (a, b, c), ex (its
  -- expiry), px (the key's deadline) and ep, the 8 bytes of its epoch to
  -- keep ('' for a value of 40 bytes: epoch 0, and nothing to keep). A
  -- dead state reads as zero, its key's deadline kept, and of epoch 0 (ep
  -- 8 zero bytes when the value has an epoch); so does one whose expiry is
  -- further than 2^37 ms (1590 days, beyond any policy's: two 366-day
  -- sliding windows, and a clock stepped back by as much again),
  -- which only a value written by something else can hold.
  local function state(v, now)
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
    return sa, sb, sc, ex, px, ep
  end

  -- bucketview: token bucket (x = burst, mw = MaxWait ms),
  -- Quota.tatOffset: off = TAT - now in 1/lim ms, clamped to [0, tau +
  -- mw*lim] (a whole bucket and its reservations); norm when the clock fell
  -- behind that.
  local function bucketview(sa, sb, now, lim, w, x, mw)
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
    return tau, off, norm
  end

  -- bucketadmits: the admission test of Quota.gcra: the cost fits now, or
  -- (a reservation) within rw ms, the Op's wait.
  local function bucketadmits(cost, x, w, off, tau, rw, lim)
    local ok
    -- inline: bucketadmits begin
    ok = cost <= x and off + cost * w <= tau + rw * lim
    -- inline: bucketadmits end
    return ok
  end

  -- gcra: the token bucket's new state, Quota.gcra: TAT = now +
  -- floor(off/lim), fraction off mod lim, ttl = max(ceil(off/lim), 1); the
  -- key's slack (in 1/lim ms) is the refill time tau, at most 1 s; its
  -- bound the refill time plus 1 s (and 2 ms of rounding).
  local function gcra(off, now, lim, tau)
    local na, nb, nc, ttl, slack, bound
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
    return na, nb, nc, ttl, slack, bound
  end

  -- windowview: window algorithms (x = phase; alg -1, a calendar window:
  -- x = its start, its index; Quota.calendarView), Quota.windowView: the window
  -- idx the decision counts in, its start, the instant at it is judged at,
  -- the counts curr and prev, and norm when the stored window is more than
  -- 1 s ahead (read as the current one).
  local function windowview(sa, sb, sc, now, alg, w, x)
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
    return idx, start, at, curr, prev, norm
  end

  -- windowadmits: the admission test of Quota.fixed and Quota.sliding.
  local function windowadmits(alg, cost, lim, w, curr, prev, at, start)
    local ok
    -- inline: windowadmits begin
    if alg ~= 0 then
      ok = cost <= lim - curr
    else
      ok = cost <= lim and prev * (w - (at - start)) + (curr + cost) * w <= lim * w
    end
    -- inline: windowadmits end
    return ok
  end

  -- windowttl: a window state's ttl and the key's bound (Quota.fixed: to
  -- the end of the window plus 1 s, for a calendar window its time to the
  -- end bounded as calendarReset does; Quota.sliding: to the end of the
  -- next window).
  local function windowttl(alg, w, start, at, now)
    local ttl, bound
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
    return ttl, bound
  end

  -- deadline: a write's expiry e = now+ttl and the key's deadline pe,
  -- which moves only when the state would outlive it, or when the recorded
  -- deadline px is beyond the policy's bound (a value written by something
  -- else): then to the expiry plus the slack (slack/lim ms, rounded up; 0
  -- for windows).
  local function deadline(now, ttl, px, bound, slack, lim)
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
    return e, pe
  end

  -- write: the new state na, nb, nc with expiry e under k, the key's
  -- deadline pe, over the state read (sa, sc, ex, px, and ep, its epoch's
  -- bytes, written after the 40 when not ''). When only the count
  -- b changed (same window or TAT, previous count, expiry and deadline) and
  -- not again (batch.lua's flag: a later Op of the flight reads the key;
  -- the general path's always), only its 8 bytes. Returns val, the 40 bytes
  -- written (nil: the count alone).
  local function write(k, na, nb, nc, e, pe, sa, sc, ex, px, ep, now, servertime, again)
    local val
    local persisted = true
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
    return val
  end

  -- general decides an Op on the general path (several quotas, or a
  -- refund) and writes its states, as limitstore.Op.Apply does: a its
  -- argument (take.lua's ARGV[1]), of n quotas, now its clock (from clock,
  -- with servertime), cost its cost, vals the values read (one per quota,
  -- false: none). Quota i's key is KEYS[i], or with h KEYS[byte(h, hp + 1 +
  -- i)] (batch.lua's head at h[hp]); got (batch.lua's values by index in
  -- KEYS), if given, follows every write. Several quotas: a first pass
  -- decides (the Op is admitted when every quota admits), a second writes;
  -- a refund: one pass. Returns whether the Op is admitted (a refund always
  -- is).
  local function general(a, n, now, servertime, cost, vals, h, hp, got)
    local refund = #a > 16 + 32 * n -- 16 + 48 * n
    local all = true
    local passes = 1
    if n > 1 and not refund then
      passes = 2
    end
    for pass = 1, passes do
      local p = 17
      for i = 1, n do
        local alg, lim, w, x, cw, ce
        alg, lim, w, x, p = sunpack('<i8i8i8i8', a, p)
        if refund then
          cw, ce, p = sunpack('<i8i8', a, p)
        end
        local ki = i
        if h then
          ki = byte(h, hp + 1 + i)
        end
        local sa, sb, sc, ex, px, ep = state(vals[i], now)
        local ok, na, nb, nc, ttl, bound, slack = false, sa, sb, sc, 0, 0, 0
        -- A refund's cost: none when the charge's epoch ce is not the
        -- state's (a Reset since; Op.Apply).
        local rc = cost
        if refund then
          local se = 0
          if ep ~= '' then
            se = sunpack('<i8', ep)
          end
          if se ~= ce then
            rc = 0
          end
        end
        if alg >= 2 then
          -- Reservations: the algorithm integer is 2 + 4*(mw + 2^22*rw),
          -- MaxWait and the Op's wait in ms (0, 0: plain 2).
          local v = (alg - 2) / 4
          local mw = v % 4194304
          local rw = (v - mw) / 4194304
          local tau, off, norm = bucketview(sa, sb, now, lim, w, x, mw)
          if refund then
            -- Quota.refund: TAT = max(TAT - g, now), g what is left of the
            -- charge, whose TAT (rounded up) is cw; none when a later
            -- reservation is still ahead.
            if off > 0 then
              local c = rc
              if c > x then
                c = x
              end
              local g = c * w
              local d = cw - now
              if d <= 0 then
                g = 0
              elseif d * lim < g then
                g = d * lim
              end
              if off > tau then
                -- A reservation still ahead that is not this charge
                -- (the TAT, rounded up, is not cw) keeps its slot:
                -- nothing comes back.
                local up = off % lim
                local tc = now + (off - up) / lim
                if up > 0 then
                  tc = tc + 1
                end
                if tc ~= cw then
                  g = 0
                end
              end
              off = off - g
              if off < 0 then
                off = 0
              end
              norm = true
            end
          else
            ok = bucketadmits(cost, x, w, off, tau, rw, lim)
            if pass == 1 then
              all = all and ok
            end
            if pass == passes and all then
              off, norm = off + cost * w, true
            end
          end
          if norm and pass == passes then
            na, nb, nc, ttl, slack, bound = gcra(off, now, lim, tau)
            bound = bound + mw
          end
        else
          -- b, c: the counts the view reads, less a refund (Quota.refund:
          -- only the charge's window, never below zero).
          local b, c = sb, sc
          if refund then
            if cw == sa then
              b = b - rc
              if b < 0 then
                b = 0
              end
            elseif alg == 0 and cw == sa - 1 then
              c = c - rc
              if c < 0 then
                c = 0
              end
            end
            na, nb, nc = sa, b, c
          end
          local idx, start, at, curr, prev, norm = windowview(sa, b, c, now, alg, w, x)
          if refund then
            if norm then
              na, nb, nc = idx, curr, prev
            end
          else
            ok = windowadmits(alg, cost, lim, w, curr, prev, at, start)
            if pass == 1 then
              all = all and ok
            end
            if pass == passes and (all or norm) then
              if all then
                curr = curr + cost
              end
              na, nb, nc = idx, curr, prev
              ttl, bound = windowttl(alg, w, start, at, now)
            end
          end
        end
        if pass == passes then
          local val
          if refund then
            -- Only a live state changes; it keeps its expiry and the key
            -- its deadline.
            if ex > now and (na ~= sa or nb ~= sb or nc ~= sc) then
              val = spack('<i8i8i8i8i8', na, nb, nc, ex, px) .. ep
              call('SETRANGE', K[ki], '0', val)
              if call('PTTL', K[ki]) == -1 then
                if servertime then
                  call('PEXPIREAT', K[ki], px)
                else
                  call('PEXPIRE', K[ki], px - now)
                end
              end
            end
          elseif ttl > 0 then
            local e, pe = deadline(now, ttl, px, bound, slack, lim)
            val = write(K[ki], na, nb, nc, e, pe, sa, sc, ex, px, ep, now, servertime, true)
          end
          if got and val then
            got[ki] = val
          end
        end
      end
    end
    return all
  end

  return clock, general
end

-- take.lua or batch.lua follows.
