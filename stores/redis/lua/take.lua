-- take.lua: one decision of quotagate's Redis store (redisstore), for an
-- Op of up to limit.MaxQuotas quotas of any algorithm, or a refund.
--
-- It transcribes line by line the admission test and the state updates of
-- limit.Op.Apply (engine/algorithm.go), refunds and the clock-step rules,
-- plus the memory store's expiry rule (a stored state counts only while its
-- expiry is after now). The clock is read once, every state is read with
-- one GET (MGET for several quotas), and only what the store contract says
-- is written: every state of an admitted Op; for a denial nothing but a
-- state the clock has fallen far behind; for a refund the changed states,
-- keeping their expiry. The numbers of the answer (Remaining, delays, TTLs)
-- are not computed here: the script returns the states it read and the
-- store runs limit.Op.Apply on them, the very function the memory store
-- runs, and checks that Apply admits exactly when the script did.
--
-- KEYS     the quotas' keys (one Cluster hash tag), in the Op's order
-- ARGV[1]  little-endian signed 64-bit integers, 8 bytes each: now in Unix
--          ms (0: read the server's TIME), cost, then per quota the
--          algorithm (0 sliding window, 1 fixed window, 2 token bucket),
--          limit, window ms, and phase ms (window algorithms) or burst
--          (token bucket), and for a refund a fifth: the window index of
--          the charge (window algorithms) or its TAT, Unix ms rounded up
--          (token bucket). So 16 + 32*n bytes for n quotas, 16 + 40*n for a
--          refund.
--
-- Reply: one bulk string, no table (a table reply costs Redis about a
-- microsecond more per call): the clock reading now as a little-endian
-- 64-bit integer, negated when the Op is denied, then the values read, as
-- stored (below), in the Op's order: 40 zero bytes for a key absent or not
-- holding a 40-byte value; for one quota (the straight path) nothing
-- instead. The store decodes the states from them with this script's rule
-- (a state counts only while its expiry is after now and at most 2^35 ms
-- ahead).
--
-- Stored value: five little-endian 64-bit integers (40 bytes) a, b, c,
-- expiry, pexpiry. Window algorithms: a = window index, b = count, c =
-- previous count; token bucket: a = TAT (Unix ms), b = TAT's fraction in
-- 1/limit ms. expiry is the Unix ms at which the state dies (now + the
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
-- plus the bucket's refill time, so that a busy key moves its deadline at
-- most once per refill time. A key thus always has a deadline, never before
-- its state dies and never further than the policy's bound (DESIGN.md,
-- "Store keys"). A value that does not decode is no state (the next write
-- replaces it and sets a deadline); a key of another type is a WRONGTYPE
-- error, never silently deleted: MGET reads such a key as none, so a key
-- without a value is read again with GET (which raises WRONGTYPE) before
-- anything is written.
--
-- Shape: one Op of one quota (nearly every call) runs the straight path;
-- several quotas or a refund run the general path (a first pass decides, a
-- second writes). The straight path creates no closure and no table (TIME's
-- aside); the general path two small ones, and MGET's for several quotas.
-- The same blocks, one per part of Apply, appear in both paths, and in
-- batch.lua: keep them in step.
--
-- Arithmetic: Lua numbers are IEEE doubles; limit.New keeps every integer
-- below 2^53, so sums, products and comparisons are exact. Floor division
-- is spelled out as a % b corrected by the remainder (a/b alone can round
-- up to the next integer), not math.floor; Lua cannot share it without a
-- closure call per use. Values are non-negative (times after 1970).
--
-- Cost: in Redis's Lua every C function call (struct.unpack, string.byte,
-- math.floor, redis.call) costs a few hundred instructions and a global
-- lookup about a hundred (callgrind, DESIGN.md "The script's own cost"), so
-- the script keeps globals in locals, makes as few C calls as it can, and
-- passes SETRANGE's offset as a string ('0'; a number argument costs Redis
-- a snprintf per call).
--
-- By hand (see the package doc for more): redis-cli --eval cannot pass
-- ARGV[1], whose packed integers hold NUL bytes, which a command-line
-- argument cannot; load the script and type ARGV[1] in redis-cli's own
-- "\xHH" escapes, read from stdin. x8 prints its arguments as such escapes,
-- 8 little-endian bytes each. A fixed window of 10 per 60000 ms, phase 0,
-- cost 1, on the server's clock:
--
--   x8() { for v; do for s in 0 8 16 24 32 40 48 56; do
--     printf '\\x%02x' $(( (v >> s) & 255 )); done; done; }
--   sha=$(redis-cli SCRIPT LOAD "$(cat stores/redis/lua/take.lua)")
--   printf 'EVALSHA %s 1 {demo}k "%s"\n' "$sha" "$(x8 0 1 1 10 60000 0)" |
--     redis-cli | od -An -v -t d8 -w8
--
-- prints now (negative: denied), then the 5 integers of the state read
-- (none on the first call); the last line is redis-cli's newline.

-- codec: begin (identical in take.lua and batch.lua)
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
-- codec: end

-- servertime: now is the server's TIME (writes use PXAT, else PX); tnow:
-- TIME's reading, once per call; again is batch.lua's flag (a later Op of
-- the flight reads the key), never set here.
local servertime, tnow, again
local K = KEYS
local n, a, p0 = #K, ARGV[1], 1
local refund = #a > 16 + 32 * n

if n == 1 and not refund then
  ---------------------------------------------------------------------------
  -- The straight path: one quota, no refund.
  ---------------------------------------------------------------------------
  local now, cost, alg, lim, w, x
  now, cost, alg, lim, w, x = sunpack('<i8i8i8i8i8i8', a, p0)

  -- The clock: the server's TIME, once, when the caller sent none.
  servertime = now == 0
  if servertime then
    if not tnow then
      local t = call('TIME')
      tnow = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
    end
    now = tnow
  end

  local ki = 1
  local k = K[ki]
  local v = call('GET', k)

  -- The state read: sa, sb, sc (a, b, c), ex (its expiry) and px (the
  -- key's deadline). A dead state reads as zero, its key's deadline kept;
  -- so does one whose expiry is further than 2^35 ms (397 days, beyond any
  -- policy's: MaxRefill plus the clock-step second), which only a value
  -- written by something else can hold.
  local sa, sb, sc, ex, px
  if v and #v == 40 then
    sa, sb, sc, ex, px = sunpack('<i8i8i8i8i8', v)
    if ex <= now or ex - now > 34359738368 then
      sa, sb, sc, ex = 0, 0, 0, 0
    end
  else
    sa, sb, sc, ex, px = 0, 0, 0, 0, 0
  end

  -- The new state (na, nb, nc), its ttl, the key's bound and slack.
  local ok, na, nb, nc, ttl, bound, slack = false, sa, sb, sc, 0, 0, 0
  if alg == 2 then
    -- Token bucket (x = burst). Quota.tatOffset: off = TAT - now in 1/lim
    -- ms, clamped to [0, tau]; norm when the clock fell behind a whole
    -- bucket.
    local tau = x * w
    local off, norm = 0, false
    if sa >= now then
      off = (sa - now) * lim + sb
      if off > tau then
        off, norm = tau, true
      end
    end

    ok = cost <= x and off + cost * w <= tau
    if ok then
      off = off + cost * w
    end
    if ok or norm then
      -- Quota.gcra: TAT = now + floor(off/lim), fraction off mod lim,
      -- ttl = max(ceil(off/lim), 1); the key's bound is twice the refill
      -- time, its slack one refill time (in 1/lim ms: tau).
      local r = (off) % lim
      local q = ((off) - r) / lim
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
      bound = 2 * tau / lim + 2

      -- The write: expiry now+ttl; the key's deadline moves only when the
      -- state would outlive it, or when the recorded deadline is beyond the
      -- policy's bound (a value written by something else): then to the
      -- expiry plus the slack (slack/lim ms, rounded up).
      local e = now + ttl
      local pe = px
      if e > px or px - now > bound then
        pe = e
        if slack > 0 then
          local sr = (slack) % lim
          local s = ((slack) - sr) / lim
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

      local val
      val = spack('<i8i8i8i8i8', na, nb, nc, e, pe)
      if pe == px then
        call('SETRANGE', k, '0', val)
      elseif servertime then
        call('SET', k, val, 'PXAT', pe)
      else
        call('SET', k, val, 'PX', pe - now)
      end
    end
  else
    -- Window algorithms (x = phase). Quota.windowView: the window idx the
    -- decision counts in, its start, the instant at it is judged at, the
    -- counts curr and prev, and norm when the stored window is more than
    -- 1 s ahead (read as the current one).
    local rem = (now - x) % w
    local idx = ((now - x) - rem) / w
    if rem < 0 then
      idx, rem = idx - 1, rem + w
    elseif rem >= w then
      idx, rem = idx + 1, rem - w
    end
    local start, at = idx * w + x, now
    local wa, norm = sa, false
    if wa > idx then
      local s2 = wa * w + x
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
    if alg == 1 then
      prev = 0
    end

    -- The admission test of Quota.fixed and Quota.sliding.
    if alg == 1 then
      ok = cost <= lim - curr
    else
      ok = cost <= lim and prev * (w - (at - start)) + (curr + cost) * w <= lim * w
    end

    if ok then
      curr = curr + cost
    end
    if ok or norm then
      -- The new state and its ttl (Quota.fixed: to the end of the window
      -- plus 1 s; Quota.sliding: to the end of the next window).
      na, nb, nc = idx, curr, prev
      if alg == 1 then
        ttl = start + w - now + 1000
        bound = w + 2000
      else
        ttl = (w - (at - start)) + w + (at - now)
        bound = 2 * w + 1000
      end

      -- The write, as the token bucket's (slack is 0 here).
      local e = now + ttl
      local pe = px
      if e > px or px - now > bound then
        pe = e
        if slack > 0 then
          local sr = (slack) % lim
          local s = ((slack) - sr) / lim
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

      if not again and pe == px and e == ex and na == sa and nc == sc then
        -- Only the count changed (same window, previous count, expiry and
        -- deadline): its 8 bytes alone.
        local val
        val = spack('<i8', nb)
        call('SETRANGE', k, '8', val)
      else
        local val
        val = spack('<i8i8i8i8i8', na, nb, nc, e, pe)
        if pe == px then
          call('SETRANGE', k, '0', val)
        elseif servertime then
          call('SET', k, val, 'PXAT', pe)
        else
          call('SET', k, val, 'PX', pe - now)
        end
      end
    end
  end

  -- The reply: now, negated when denied, then the value read if it is one.
  local r = now
  if not ok then
    r = -now
  end
  r = spack('<i8', r)
  if v and #v == 40 then
    return r .. v
  end
  return r
end

-----------------------------------------------------------------------------
-- The general path: several quotas (a first pass decides, a second writes),
-- or a refund (one pass).
-----------------------------------------------------------------------------
local now, cost, pos
now, cost, pos = sunpack('<i8i8', a, p0)

-- The clock, as on the straight path.
servertime = now == 0
if servertime then
  if not tnow then
    local t = call('TIME')
    tnow = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  end
  now = tnow
end

-- The values, one per quota (false: none); a key with no string value is
-- read again with GET, so that a key of another type is a WRONGTYPE error
-- before anything is written.
local vals
if n == 1 then
  vals = {call('GET', K[1])}
else
  vals = call('MGET', unpack(K))
end
for i = 1, n do
  if not vals[i] then
    vals[i] = call('GET', K[i])
  end
end

-- read: the states as first read (3 per quota), for the refund's test of
-- what changed; all: whether every quota admits.
local read = {}
local all = true
local passes = 1
if n > 1 and not refund then
  passes = 2
end
for pass = 1, passes do
  local p = pos
  for i = 1, n do
    local alg, lim, w, x, cw
    alg, lim, w, x, p = sunpack('<i8i8i8i8', a, p)
    if refund then
      cw, p = sunpack('<i8', a, p)
    end
    local ki = i
    local k = K[ki]
    local v = vals[i]

    -- The state read, as on the straight path.
    local sa, sb, sc, ex, px
    if v and #v == 40 then
      sa, sb, sc, ex, px = sunpack('<i8i8i8i8i8', v)
      if ex <= now or ex - now > 34359738368 then
        sa, sb, sc, ex = 0, 0, 0, 0
      end
    else
      sa, sb, sc, ex, px = 0, 0, 0, 0, 0
    end

    if pass == 1 then
      read[3 * i], read[3 * i + 1], read[3 * i + 2] = sa, sb, sc
    end
    local ok, na, nb, nc, ttl, bound, slack = false, sa, sb, sc, 0, 0, 0
    if alg == 2 then
      -- Token bucket: Quota.tatOffset, as on the straight path.
      local tau = x * w
      local off, norm = 0, false
      if sa >= now then
        off = (sa - now) * lim + sb
        if off > tau then
          off, norm = tau, true
        end
      end

      if refund then
        -- Quota.refund: TAT = max(TAT - g, now), g what is left of the
        -- charge, whose TAT (rounded up) is cw.
        if off > 0 then
          local c = cost
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
          off = off - g
          if off < 0 then
            off = 0
          end
          norm = true
        end
      else
        ok = cost <= x and off + cost * w <= tau
        if pass == 1 then
          all = all and ok
        end
        if pass == passes and all then
          off, norm = off + cost * w, true
        end
      end
      if norm and pass == passes then
        -- Quota.gcra, as on the straight path.
        local r = (off) % lim
        local q = ((off) - r) / lim
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
        bound = 2 * tau / lim + 2
      end
    else
      if refund then
        -- Quota.refund: only the charge's window, never below zero.
        if cw == sa then
          sb = sb - cost
          if sb < 0 then
            sb = 0
          end
        elseif alg == 0 and cw == sa - 1 then
          sc = sc - cost
          if sc < 0 then
            sc = 0
          end
        end
        na, nb, nc = sa, sb, sc
      end

      -- Quota.windowView, as on the straight path.
      local rem = (now - x) % w
      local idx = ((now - x) - rem) / w
      if rem < 0 then
        idx, rem = idx - 1, rem + w
      elseif rem >= w then
        idx, rem = idx + 1, rem - w
      end
      local start, at = idx * w + x, now
      local wa, norm = sa, false
      if wa > idx then
        local s2 = wa * w + x
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
      if alg == 1 then
        prev = 0
      end

      if refund then
        if norm then
          na, nb, nc = idx, curr, prev
        end
      else
        -- The admission test, as on the straight path.
        if alg == 1 then
          ok = cost <= lim - curr
        else
          ok = cost <= lim and prev * (w - (at - start)) + (curr + cost) * w <= lim * w
        end

        if pass == 1 then
          all = all and ok
        end
        if pass == passes and (all or norm) then
          if all then
            curr = curr + cost
          end
          -- The new state and its ttl, as on the straight path.
          na, nb, nc = idx, curr, prev
          if alg == 1 then
            ttl = start + w - now + 1000
            bound = w + 2000
          else
            ttl = (w - (at - start)) + w + (at - now)
            bound = 2 * w + 1000
          end
        end
      end
    end
    if pass == passes then
      if refund then
        -- Only a live state changes; it keeps its expiry and the key its
        -- deadline.
        if ex > now and (na ~= read[3 * i] or nb ~= read[3 * i + 1] or nc ~= read[3 * i + 2]) then
          local val
          val = spack('<i8i8i8i8i8', na, nb, nc, ex, px)
          call('SETRANGE', k, '0', val)
        end
      elseif ttl > 0 then
        -- The write, as on the straight path (never the count alone).
        local e = now + ttl
        local pe = px
        if e > px or px - now > bound then
          pe = e
          if slack > 0 then
            local sr = (slack) % lim
            local s = ((slack) - sr) / lim
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

        local val
        val = spack('<i8i8i8i8i8', na, nb, nc, e, pe)
        if pe == px then
          call('SETRANGE', k, '0', val)
        elseif servertime then
          call('SET', k, val, 'PXAT', pe)
        else
          call('SET', k, val, 'PX', pe - now)
        end
      end
    end
  end
end
local ok = all

-- The reply: now, negated when denied, then every value read (40 zero
-- bytes for none).
local r = now
if not ok then
  r = -now
end
r = spack('<i8', r)
local parts = {r}
for i = 1, n do
  local v = vals[i]
  if v and #v == 40 then
    parts[i + 1] = v
  else
    parts[i + 1] = string.rep('\0', 40)
  end
end
return table.concat(parts)
