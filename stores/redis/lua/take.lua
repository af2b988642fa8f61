-- take.lua: one decision of quotagate's Redis store (redisstore), for an
-- Op of up to limitstore.MaxQuotas quotas of any algorithm, or a refund.
-- The store sends it after prelude.lua (scripts.go), which holds the
-- algorithm (library), the codec and the stored value's layout.
--
-- The clock is read once, every state is read with one GET (MGET for
-- several quotas), and what the store contract says is written (see
-- prelude.lua).
--
-- KEYS     the quotas' keys (one Cluster hash tag), in the Op's order
-- ARGV[1]  little-endian signed 64-bit integers, 8 bytes each: now in Unix
--          ms (0: read the server's TIME), cost, then per quota the
--          algorithm (0 sliding window, 1 fixed window, -1 a calendar
--          window, the fixed window the engine names: phase ms = its start;
--          2 token bucket;
--          a token bucket with reservations 2 + 4*(mw + 2^22*rw): its
--          MaxWait mw and the Op's wait rw, ms, rw <= mw < 2^22),
--          limit, window ms, and phase ms (window algorithms) or burst
--          (token bucket), and for a refund a fifth and a sixth: the window
--          index of the charge (window algorithms) or its TAT, Unix ms
--          rounded up (token bucket), and the epoch of the state it was
--          charged in (a refund to a state of another epoch gives nothing
--          back). So 16 + 32*n bytes for n quotas, 16 + 48*n for a refund.
--
-- Reply: one bulk string, no table (a table reply costs Redis about a
-- microsecond more per call): the clock reading now as a little-endian
-- 64-bit integer, negated when the Op is denied, then the values read, as
-- stored (prelude.lua), in the Op's order, 48 bytes each (a 40-byte value,
-- of epoch 0, followed by 8 zero bytes; 48 zero bytes for a key absent or
-- not holding a value of the store's); for one quota (the straight path)
-- the value as stored, 40 or 48 bytes, or nothing. The store decodes the
-- states from them with the scripts' rule (a state counts only while its
-- expiry is after now and at most 2^37 ms ahead).
--
-- Shape: one Op of one quota (nearly every call) runs the straight path,
-- prelude.lua's steps inline (each copy marked, and tested to be the
-- step's function body); several quotas or a refund run the general path,
-- prelude.lua's general. The straight path creates no closure and no table
-- (TIME's aside); the general path makes prelude.lua's library, a small
-- table, and MGET's for several quotas.
--
-- By hand: give the integers of ARGV[1] as decimal arguments instead, one
-- each (more than one argument: the script packs them itself), and run the
-- joined script with redis-cli --eval. A fixed window of 10 per 60000 ms,
-- phase 0, cost 1, on the server's clock:
--
--   cat stores/redis/lua/prelude.lua stores/redis/lua/take.lua > /tmp/take.lua
--   redis-cli --eval /tmp/take.lua '{demo}k' , 0 1 1 10 60000 0
--
-- prints the reply as redis-cli escapes it. To read its integers, or to
-- send ARGV[1] packed as the store does, load the script and type ARGV[1]
-- in redis-cli's own "\xHH" escapes, read from stdin; x8 prints its
-- arguments as such escapes, 8 little-endian bytes each:
--
--   x8() { for v; do for s in 0 8 16 24 32 40 48 56; do
--     printf '\\x%02x' $(( (v >> s) & 255 )); done; done; }
--   sha=$(cat stores/redis/lua/prelude.lua stores/redis/lua/take.lua |
--     redis-cli -x SCRIPT LOAD)
--   printf 'EVALSHA %s 1 {demo}k "%s"\n' "$sha" "$(x8 0 1 1 10 60000 0)" |
--     redis-cli | od -An -v -t d8 -w8
--
-- prints now (negative: denied), then the 5 integers of the state read
-- (none on the first call); the last line is redis-cli's newline.

local n, a = #K, ARGV[1]
if #ARGV > 1 then -- by hand: the integers as decimal arguments
  local packed = {}
  for i = 1, #ARGV do
    packed[i] = spack('<i8', tonumber(ARGV[i]))
  end
  a = table.concat(packed)
end
local refund = #a > 16 + 32 * n

-- One Op: a write in place repairs its key's deadline itself (prelude.lua,
-- persisted).
persisted = true

if n == 1 and not refund then
  ---------------------------------------------------------------------------
  -- The straight path: one quota, no refund; prelude.lua's steps inline.
  ---------------------------------------------------------------------------
  local now, cost, alg, lim, w, x = sunpack('<i8i8i8i8i8i8', a)

  -- The clock: the server's TIME, once, when the caller sent none.
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

  local k = K[1]
  local v = call('GET', k)
  -- The decision: again is batch.lua's flag, never set here (the count
  -- alone may be written); val is not needed.
  local again, val
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

  -- The reply: now, negated when denied, then the value read if it is one.
  local r = now
  if not ok then
    r = -now
  end
  r = spack('<i8', r)
  if v and (#v == 40 or #v == 48) then
    return r .. v
  end
  return r
end

-----------------------------------------------------------------------------
-- The general path: several quotas, or a refund (prelude.lua's general).
-----------------------------------------------------------------------------
local clock, general = library(call, floor, byte, sunpack, spack, K)
local now, cost = sunpack('<i8i8', a)
now, servertime, tnow = clock(now, tnow)

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

local ok = general(a, n, now, servertime, cost, vals)

-- The reply: now, negated when denied, then every value read, 48 bytes
-- each (a 40-byte value and 8 zero bytes; 48 zero bytes for none).
local r = now
if not ok then
  r = -now
end
r = spack('<i8', r)
local parts = {r}
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
return table.concat(parts)
