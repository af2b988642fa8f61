package redisstore

import "github.com/redis/rueidis"

// takeSource is the one script of the store (store contract v2): a
// line-by-line transcription of the admission test and the state updates of
// limit.Op.Apply (engine/algorithm.go) for up to limit.MaxQuotas quotas of
// any algorithm, refunds and the clock-step rules, plus the memory store's
// expiry rule (a stored State counts only while its expiry is after now).
// It runs as one EVALSHA per decision: the clock is read once, every state
// is read with one GET (MGET for several quotas), and only what the contract
// says is written (every state of an admitted Op; nothing for a denial but a
// state the clock has fallen far behind; the changed states of a refund,
// keeping their expiry). The numbers of the answer (Remaining, delays, TTLs)
// are not computed here: the script returns the states it read and Take
// runs limit.Op.Apply on them, the very function the memory store runs, so
// the two stores' Results are the same by construction. Take also checks
// that Apply admits exactly when the script did.
//
// Keys and arguments (integers in decimal):
//
//	KEYS     the quotas' keys (one Cluster hash tag), in the Op's order
//	ARGV[1]  now in Unix ms, or "" to read the server's TIME (once)
//	ARGV[2]  cost
//	then per quota: algorithm (0 sliding window, 1 fixed window, 2 token
//	bucket), limit, window ms, phase ms (window algorithms) or burst (token
//	bucket), and for a refund a fifth: the window index of the charge
//
// Reply: {allowed (0|1), now, then per quota a, b, c}: the state read (zero
// when absent, expired or unreadable): window algorithms a = window index,
// b = count, c = previous count; token bucket a = TAT (Unix ms), b = TAT's
// fraction in 1/limit ms.
//
// Stored value, five numbers a, b, c, expiry, pexpiry: the state as above;
// expiry, the Unix ms at which the state dies (now + the Result's TTLMS at
// its last write: the memory store's rule, so both stores forget a state at
// the same instant whatever the clock does); pexpiry, the key's own
// deadline in Redis. A write sets the key's deadline only when the state
// would outlive it (SET ... PXAT, or PX with a caller's clock); otherwise it
// keeps it (SET ... KEEPTTL), which costs Redis far less. Window algorithms
// set the deadline to the state's expiry (once per window and key); a token
// bucket to its expiry plus the bucket's refill time, so that a busy key
// moves its deadline at most once per refill time. So a key always has a
// deadline, never shorter than its state's life and never longer than the
// policy's bound (DESIGN.md, "Store keys").
//
// Where the server's Lua has the struct library (Redis, Valkey), the value
// is 40 bytes of little-endian doubles (struct.pack '<ddddd'): the cheapest
// to read and write. Elsewhere (miniredis) it is the five integers in
// decimal, separated by spaces. A value that does not decode is no state
// (the next write replaces it and sets a deadline); a key of another type is
// a WRONGTYPE error, i.e. the failure mode, never silently deleted.
//
// Arithmetic: Lua numbers are IEEE doubles; limit.New keeps every integer
// below 2^53, so sums, products and comparisons are exact; floor division is
// math.floor(a/b) corrected by the remainder (a/b alone can round up to the
// next integer). The script creates no closure and no table beyond the reply
// (and MGET's for several quotas).
const takeSource = `
local struct = rawget(_G, 'struct')
local n = #KEYS
local per = 4
local refund = #ARGV > 2 + 4 * n
if refund then
  per = 5
end
local servertime = ARGV[1] == ''
local now
if servertime then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])
local vals
if n == 1 then
  vals = redis.call('GET', KEYS[1])
else
  vals = redis.call('MGET', unpack(KEYS))
end
local reply = {1, now, 0, 0, 0}
local all = true
-- Several quotas: a first pass decides, a second one writes.
local passes = 1
if n > 1 and not refund then
  passes = 2
end
for pass = 1, passes do
  for i = 1, n do
    local o = 2 + (i - 1) * per
    local alg, lim, w, x = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
    local v = vals
    if n > 1 then
      v = vals[i]
    end
    local sa, sb, sc, ex, px = 0, 0, 0, 0, 0
    if v then
      if struct then
        if #v == 40 then
          sa, sb, sc, ex, px = struct.unpack('<ddddd', v)
        end
      else
        local p, q, r, s, u = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
        if u then
          sa, sb, sc, ex, px = tonumber(p), tonumber(q), tonumber(r), tonumber(s), tonumber(u)
        end
      end
      if ex <= now then
        sa, sb, sc, ex = 0, 0, 0, 0
      end
    end
    if pass == 1 then
      reply[3 * i], reply[3 * i + 1], reply[3 * i + 2] = sa, sb, sc
    end
    local na, nb, nc, ttl, slack, bound = sa, sb, sc, 0, 0, 0
    if alg == 2 then
      -- Token bucket (Quota.gcra, tatOffset), in units of 1/lim ms:
      -- emission interval w, tolerance tau = burst*w, off = TAT - now.
      local tau = x * w
      local off, norm = 0, false
      if sa >= now then
        off = (sa - now) * lim + sb
        if off > tau then
          off, norm = tau, true
        end
      end
      if refund then
        if off > 0 then
          local c = cost
          if c > x then
            c = x
          end
          off = off - c * w
          if off < 0 then
            off = 0
          end
          norm = true
        end
      else
        local ok = cost <= x and off + cost * w <= tau
        if pass == 1 then
          all = all and ok
        end
        if pass == passes and all then
          off, norm = off + cost * w, true
        end
      end
      if norm and pass == passes then
        local q = math.floor(off / lim)
        local r = off - q * lim
        if r < 0 then
          q, r = q - 1, r + lim
        elseif r >= lim then
          q, r = q + 1, r - lim
        end
        na, nb, nc = now + q, r, 0
        -- ttl = max(ceil(off/lim), 1)
        ttl = q
        if r > 0 then
          ttl = q + 1
        end
        if ttl < 1 then
          ttl = 1
        end
        slack = math.floor((tau + lim - 1) / lim)
        if slack * lim < tau then
          slack = slack + 1
        elseif (slack - 1) * lim >= tau then
          slack = slack - 1
        end
        bound = 2 * slack
      end
    else
      -- Window algorithms (Quota.windowView, fixed, sliding); x = phase.
      local idx = math.floor((now - x) / w)
      local rem = now - x - idx * w
      if rem < 0 then
        idx = idx - 1
      elseif rem >= w then
        idx = idx + 1
      end
      local start, at = idx * w + x, now
      local wa, norm = sa, false
      if refund then
        local cw = tonumber(ARGV[o + 5])
        if cw == sa then
          nb = sb - cost
          if nb < 0 then
            nb = 0
          end
        elseif alg == 0 and cw == sa - 1 then
          nc = sc - cost
          if nc < 0 then
            nc = 0
          end
        end
        wa = sa
        sb, sc = nb, nc
      end
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
        local ok
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
          na, nb, nc = idx, curr, prev
          if alg == 1 then
            ttl = start + w - now + 1000
          else
            ttl = (w - (at - start)) + w + (at - now)
          end
        end
      end
      if alg == 1 then
        bound = w + 2000
      else
        bound = 2 * w + 1000
      end
    end
    if pass == passes and (na ~= sa or nb ~= reply[3 * i + 1] or nc ~= reply[3 * i + 2] or ttl > 0) then
      local k = KEYS[i]
      if refund then
        -- Only a state that is alive changes; it keeps its expiry and the
        -- key its deadline.
        if ex > now then
          local val
          if struct then
            val = struct.pack('<ddddd', na, nb, nc, ex, px)
          else
            val = string.format('%d %d %d %d %d', na, nb, nc, ex, px)
          end
          redis.call('SET', k, val, 'KEEPTTL')
        end
      else
        local e = now + ttl
        local pe = px
        if e > px or px - now > bound then
          pe = e + slack
        end
        local val
        if struct then
          val = struct.pack('<ddddd', na, nb, nc, e, pe)
        else
          val = string.format('%d %d %d %d %d', na, nb, nc, e, pe)
        end
        if pe == px then
          redis.call('SET', k, val, 'KEEPTTL')
        elseif servertime then
          redis.call('SET', k, val, 'PXAT', pe)
        else
          redis.call('SET', k, val, 'PX', pe - now)
        end
      end
    end
  end
end
if not all then
  reply[1] = 0
end
return reply
`

// takeScript is created once: rueidis sends EVALSHA and falls back to EVAL
// (which also loads the script) on NOSCRIPT, per node.
var takeScript = rueidis.NewLuaScript(takeSource)
