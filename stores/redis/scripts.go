package redisstore

import "github.com/redis/rueidis"

// The Lua scripts below are line-by-line transcriptions of limit.Op.Apply
// (engine/algorithm.go) plus the memory store's expiry rule (a stored State is
// used only while its expiry time is after now). Each runs as one EVALSHA per
// decision: read the clock once, read the state, decide, and, only when the
// request is allowed, write the new state together with its time to live
// (one SET ... PX/PXAT). A denied request writes nothing.
//
// Keys and arguments (all integers in decimal):
//
//	KEYS[1]  op.Key: one string per (bucket, identity)
//	ARGV[1]  now in Unix ms, or "" to read the server's TIME (once)
//	window scripts: ARGV[2..5] = Limit, WindowMS, PhaseMS, Cost
//	GCRA script:    ARGV[2..4] = IntervalMS, Burst, Cost
//
// Reply: {allowed (0|1), Remaining, ResetAfterMS, RetryAfterMS, NowMS, TTLMS}.
//
// Stored value, decimal integers separated by one space:
//
//	SlidingWindow  "<window> <count> <prev> <expiry>"
//	FixedWindow    "<window> <count> <expiry>"
//	TokenBucket    "<tat> <expiry>"
//
// where window is the index of the current window, count the cost admitted in
// it, prev the cost admitted in the one before, tat the theoretical arrival
// time (Unix ms), and expiry the Unix ms at which the state dies (now +
// TTLMS): the memory store's expiry, so that both stores forget a state at
// the same instant whatever the clock does. A value that does not parse is
// treated as no state (and overwritten by the next admitted request).
//
// Arithmetic: Lua numbers are IEEE doubles; every value stays below 2^53
// (limit.New guarantees it), so sums and products are exact. Division goes
// through fdiv, a floor division corrected by its remainder, so that it is
// exact where a/b alone could round up to the next integer. Integers are
// written with itoa: Redis' Lua 5.1 tostring prints "%.14g", which is exact
// only below 10^14.

// prelude is shared by the three scripts: the key, the clock, floor
// division, integer formatting, the state writer and the TTL repair.
const prelude = `
local k = KEYS[1]
local servertime = ARGV[1] == ''
local now
if servertime then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

-- floor(a / b) for b > 0 and |a| < 2^53, exact.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- itoa formats an integer below 2^53 exactly.
local function itoa(n)
  if n == 0 then
    return '0'
  elseif n < 0 then
    return '-' .. itoa(-n)
  elseif n < 1e14 then
    return tostring(n)
  end
  local hi = fdiv(n, 1e7)
  local lo = tostring(n - hi * 1e7)
  return tostring(hi) .. string.rep('0', 7 - #lo) .. lo
end

-- put writes the state and its time to live in one command. On server time
-- the deadline is absolute (now + ttl on the clock TIME read), so the key
-- dies exactly when the state does; with a caller's clock it is relative.
local function put(v, ttl)
  if servertime then
    redis.call('SET', k, v, 'PXAT', now + ttl)
  else
    redis.call('SET', k, v, 'PX', ttl)
  end
end

-- repair bounds a key found without a time to live (written by something
-- else): a denied request writes nothing else.
local function repair(bound)
  if redis.call('PTTL', k) == -1 then
    redis.call('PEXPIRE', k, bound)
  end
end

local v = redis.call('GET', k)
`

// fixedSource transcribes Op.fixed (and Op.window, Result.shift).
const fixedSource = prelude + `
local limit, w, phase, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local sw, sc = 0, 0
if v then
  local a, b, e = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if e and tonumber(e) > now then
    sw, sc = tonumber(a), tonumber(b)
  end
end

local idx = fdiv(now - phase, w)
local start, at = idx * w + phase, now
if idx < sw then
  idx = sw
  start = idx * w + phase
  at = start
end
local count = 0
if sw == idx then
  count = sc
end
-- Result.shift: delays computed at at count from the real now.
local skew = at - now
local reset = start + w - at + skew
if cost <= limit - count then
  count = count + cost
  local ttl = reset + 1000
  put(itoa(idx) .. ' ' .. itoa(count) .. ' ' .. itoa(now + ttl), ttl)
  return {1, limit - count, reset, 0, now, ttl}
end
if v then
  repair(w + 1000)
end
return {0, math.max(limit - count, 0), reset, reset, now, 0}
`

// slidingSource transcribes Op.sliding (and Op.window, slidingReset,
// Result.shift).
const slidingSource = prelude + `
local limit, w, phase, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local sw, sc, sp = 0, 0, 0
if v then
  local a, b, c, e = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
  if e and tonumber(e) > now then
    sw, sc, sp = tonumber(a), tonumber(b), tonumber(c)
  end
end

local idx = fdiv(now - phase, w)
local start, at = idx * w + phase, now
if idx < sw then
  idx = sw
  start = idx * w + phase
  at = start
end
local curr, prev = 0, 0
if sw == idx then
  curr, prev = sc, sp
elseif sw == idx - 1 then
  prev = sc
end
local el = at - start
local toEnd = w - el
local skew = at - now -- Result.shift: delays computed at at count from the real now
local weighted = prev * toEnd
local lw = limit * w

local function reset()
  if curr > 0 then
    return toEnd + w + skew
  elseif prev > 0 then
    return toEnd + skew
  end
  return skew
end

if weighted + (curr + cost) * w <= lw then
  curr = curr + cost
  local ttl = toEnd + w + skew
  put(itoa(idx) .. ' ' .. itoa(curr) .. ' ' .. itoa(prev) .. ' ' .. itoa(now + ttl), ttl)
  return {1, math.max(fdiv(lw - weighted, w) - curr, 0), reset(), 0, now, ttl}
end
local retry = 0
if cost > limit then
  retry = math.max(reset(), 1) -- never admissible: when the whole quota is back
elseif curr + cost <= limit then
  retry = w - fdiv((limit - curr - cost) * w, prev) - el + skew
else
  retry = toEnd + math.max(w - fdiv((limit - cost) * w, curr), 0) + skew
end
if v then
  repair(2 * w)
end
return {0, math.max(fdiv(lw - weighted, w) - curr, 0), reset(), retry, now, 0}
`

// gcraSource transcribes Op.gcra.
const gcraSource = prelude + `
local t, burst, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local st = 0
if v then
  local a, e = string.match(v, '^(%-?%d+) (%-?%d+)$')
  if e and tonumber(e) > now then
    st = tonumber(a)
  end
end

local tau = burst * t
local tat = math.max(st, now)
local newTAT = tat + cost * t
if newTAT - now <= tau then
  local ttl = math.max(newTAT - now, 1)
  put(itoa(newTAT) .. ' ' .. itoa(now + ttl), ttl)
  return {1, fdiv(tau - (newTAT - now), t), newTAT - now, 0, now, ttl}
end
if v then
  repair(math.max(tau, 1))
end
local retry = newTAT - tau - now
if cost > burst then
  retry = math.max(tat - now, 1) -- never admissible: when the whole quota is back
end
return {0, math.max(fdiv(tau - (tat - now), t), 0), tat - now, retry, now, 0}
`

// One script per algorithm, created once: rueidis sends EVALSHA and falls
// back to EVAL (which also loads the script) on NOSCRIPT, per node.
var (
	fixedScript   = rueidis.NewLuaScript(fixedSource)
	slidingScript = rueidis.NewLuaScript(slidingSource)
	gcraScript    = rueidis.NewLuaScript(gcraSource)
)
