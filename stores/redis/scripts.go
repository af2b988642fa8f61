package redisstore

import "github.com/redis/rueidis"

// The Lua scripts below are line-by-line transcriptions of limit.Op.Apply
// (engine/algorithm.go) plus the memory store's expiry rule (a stored State is
// used only while its expiry time is after now). Each runs as one EVALSHA per
// decision: read the clock once, read the state, decide, and, only when the
// request is allowed, write the new state with its time to live.
//
// Keys and arguments (all integers in decimal):
//
//	KEYS[1]  op.Key: one hash per (bucket, identity)
//	ARGV[1]  now in Unix ms, or "" to read the server's TIME (once)
//	window scripts: ARGV[2..5] = Limit, WindowMS, PhaseMS, Cost
//	GCRA script:    ARGV[2..4] = IntervalMS, Burst, Cost
//
// Reply: {allowed (0|1), Remaining, ResetAfterMS, RetryAfterMS, NowMS, TTLMS}.
//
// Stored hash fields: w (window index), c (count in window w), p (count in
// window w-1, sliding window only), t (TAT, token bucket), e (the Unix ms at
// which the state dies, now + TTLMS: the memory store's expiry, so that both
// stores forget a state at the same instant whatever the clock does).
//
// Arithmetic: Lua numbers are IEEE doubles; every value stays below 2^53
// (limit.New guarantees it), so sums and products are exact. Division goes
// through fdiv, a floor division corrected by its remainder, so that it is
// exact where a/b alone could round up to the next integer. Numbers reach
// Redis as command arguments (converted with %.17g: exact) and never through
// tostring (%.14g: not exact above 10^14).

// prelude is shared by the three scripts: the key, the clock, floor division
// and the two expiry writers.
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

-- expire gives the state just written its time to live. On server time the
-- deadline is absolute (now + ttl on the same clock TIME read), so the key
-- dies exactly when the state does; with a caller's clock it is relative.
local function expire(ttl)
  if servertime then
    redis.call('PEXPIREAT', k, now + ttl)
  else
    redis.call('PEXPIRE', k, ttl)
  end
end

-- repair bounds a key found without a time to live (written by something
-- else, or left by an old version): a denied request writes nothing else.
local function repair(bound)
  if redis.call('PTTL', k) == -1 then
    redis.call('PEXPIRE', k, bound)
  end
end
`

// fixedSource transcribes Op.fixed (and Op.window).
const fixedSource = prelude + `
local limit, w, phase, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local v = redis.call('HMGET', k, 'w', 'c', 'e')
local sw, sc = 0, 0
local a, b, e = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
if a and b and e and e > now then
  sw, sc = a, b
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
local reset = start + w - at
if cost <= limit - count then
  count = count + cost
  local ttl = reset + 1000
  redis.call('HSET', k, 'w', idx, 'c', count, 'e', now + ttl)
  expire(ttl)
  return {1, limit - count, reset, 0, now, ttl}
end
if v[1] or v[3] then
  repair(w + 1000)
end
return {0, math.max(limit - count, 0), reset, reset, now, 0}
`

// slidingSource transcribes Op.sliding (and Op.window, slidingReset).
const slidingSource = prelude + `
local limit, w, phase, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local v = redis.call('HMGET', k, 'w', 'c', 'p', 'e')
local sw, sc, sp = 0, 0, 0
local a, b, c, e = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
if a and b and c and e and e > now then
  sw, sc, sp = a, b, c
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
local weighted = prev * toEnd
local lw = limit * w

local function reset()
  if curr > 0 then
    return toEnd + w
  elseif prev > 0 then
    return toEnd
  end
  return 0
end

if weighted + (curr + cost) * w <= lw then
  curr = curr + cost
  local ttl = toEnd + w
  redis.call('HSET', k, 'w', idx, 'c', curr, 'p', prev, 'e', now + ttl)
  expire(ttl)
  return {1, math.max(fdiv(lw - weighted, w) - curr, 0), reset(), 0, now, ttl}
end
local retry
if cost > limit then
  retry = toEnd + w
elseif curr + cost <= limit then
  retry = w - fdiv((limit - curr - cost) * w, prev) - el
else
  retry = toEnd + math.max(w - fdiv((limit - cost) * w, curr), 0)
end
if v[1] or v[4] then
  repair(2 * w)
end
return {0, math.max(fdiv(lw - weighted, w) - curr, 0), reset(), retry, now, 0}
`

// gcraSource transcribes Op.gcra.
const gcraSource = prelude + `
local t, burst, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', k, 't', 'e')
local st = 0
local a, e = tonumber(v[1]), tonumber(v[2])
if a and e and e > now then
  st = a
end

local tau = burst * t
local tat = math.max(st, now)
local newTAT = tat + cost * t
if newTAT - now <= tau then
  local ttl = math.max(newTAT - now, 1)
  redis.call('HSET', k, 't', newTAT, 'e', now + ttl)
  expire(ttl)
  return {1, fdiv(tau - (newTAT - now), t), newTAT - now, 0, now, ttl}
end
if v[1] or v[2] then
  repair(math.max(tau, 1))
end
return {0, math.max(fdiv(tau - (tat - now), t), 0), tat - now, newTAT - tau - now, now, 0}
`

// One script per algorithm, created once: rueidis sends EVALSHA and falls
// back to EVAL (which also loads the script) on NOSCRIPT, per node.
var (
	fixedScript   = rueidis.NewLuaScript(fixedSource)
	slidingScript = rueidis.NewLuaScript(slidingSource)
	gcraScript    = rueidis.NewLuaScript(gcraSource)
)
