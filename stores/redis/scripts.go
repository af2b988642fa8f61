package redisstore

import "github.com/redis/rueidis"

// The store's script (store contract v2) transcribes line by line the
// admission test and the state updates of limit.Op.Apply
// (engine/algorithm.go) for up to limit.MaxQuotas quotas of any algorithm,
// refunds and the clock-step rules, plus the memory store's expiry rule (a
// stored State counts only while its expiry is after now). It runs as one
// EVALSHA per decision, or per flight of decisions (group commit: see
// batchSource, which runs the same body per Op): the clock is read once,
// every state is read with one GET (MGET for several quotas; the batch
// script one MGET for the whole flight), and only what the contract says is written:
// every state of an admitted Op; for a denial nothing but a state the clock
// has fallen far behind; for a refund the changed states, keeping their
// expiry. The numbers of the answer (Remaining, delays, TTLs) are not
// computed here: the script returns the states it read and Take runs
// limit.Op.Apply on them, the very function the memory store runs, so the
// two stores' Results are the same by construction; Take also checks that
// Apply admits exactly when the script did.
//
// Keys and arguments:
//
//	KEYS     the quotas' keys (one Cluster hash tag), in the Op's order
//	ARGV[1]  little-endian 64-bit integers: now in Unix ms (0: read the
//	         server's TIME), cost, then per quota the algorithm (0 sliding
//	         window, 1 fixed window, 2 token bucket), limit, window ms, and
//	         phase ms (window algorithms) or burst (token bucket), and for a
//	         refund a fifth: the window index of the charge (window
//	         algorithms) or its TAT, Unix ms rounded up (token bucket)
//
// Reply: one bulk string, no table (a table reply costs Redis about a
// microsecond more per call): the clock reading now as a little-endian
// 64-bit integer, negated when the Op is denied, then the values read, as
// stored (below), in the Op's order: 40 zero bytes for a key absent or not
// holding a 40-byte value; for one quota (the straight path) nothing
// instead. Take decodes the states from them with the script's own rule (a
// state counts only while its expiry is after now and at most 2^35 ms
// ahead); window algorithms a = window index, b = count, c = previous
// count; token bucket a = TAT (Unix ms), b = TAT's fraction in 1/limit ms.
//
// Stored value: five little-endian 64-bit integers (40 bytes) a, b, c,
// expiry, pexpiry. a, b, c are the state as above; expiry is the Unix ms at
// which the state dies (now + the Result's TTLMS at its last write: the
// memory store's rule, so both stores forget a state at the same instant
// whatever the clock does); pexpiry is the key's own deadline in Redis. A
// write sets the key's deadline only when the state would outlive it (SET
// ... PXAT, or PX with a caller's clock), and otherwise keeps it by
// overwriting the 40 bytes in place (SETRANGE key 0: the key exists and
// holds 40 bytes, or the deadline read would be 0), which costs Redis far
// less, and less than SET ... KEEPTTL; when only the count b changed (a
// window's next admission, nearly every write) only its 8 bytes (SETRANGE
// key 8; not for a key a later Op of the flight reads): packing one integer
// costs Redis 1.2k instructions, five 3.3k (callgrind). Window algorithms set the deadline
// to the state's expiry (once per window and key); a token bucket to its
// expiry plus the bucket's refill time, so that a busy key moves its
// deadline at most once per refill time. A key thus always has a deadline,
// never before its state dies and never further than the policy's bound
// (DESIGN.md, "Store keys"). A value that does not decode is no state (the
// next write replaces it and sets a deadline); a key of another type is a
// WRONGTYPE error, i.e. the failure mode, never silently deleted: MGET
// reads such a key as none, so a key without a value is read again with GET
// (which raises WRONGTYPE) before anything is written.
//
// Binary packing (the struct library of the server's Lua: Redis, Valkey) is
// what makes the script cheap: six decimal arguments and a decimal value
// parsed with string.match cost Redis several microseconds more per call.
// Where the Lua has no struct library (miniredis), the same bytes are
// packed and unpacked by a few lines of plain Lua, defined only there.
//
// Shape: one Op of one quota (nearly every call) runs a straight path for
// its algorithm; several quotas or a refund run the general loop (a first
// pass decides, a second writes). Both are assembled from the same
// fragments below, one per part of Apply. The straight path creates no
// closure and no table (TIME's aside); the general loop two small ones, and
// MGET's for several quotas.
//
// Arithmetic: Lua numbers are IEEE doubles; limit.New keeps every integer
// below 2^53, so sums, products and comparisons are exact; floor division is
// a % b corrected by the remainder (divmod: a/b alone can round up to the
// next integer). Values are non-negative (times after 1970).
//
// Cost: in Redis's Lua every C function call (struct.unpack, string.byte,
// math.floor, redis.call) costs a few hundred instructions and a global
// lookup about a hundred (measured with callgrind, DESIGN.md "The script's
// own cost"), so the scripts keep globals in locals (preamble), make as few
// C calls per Op as they can, and pass SETRANGE's offset as the string '0'
// (a number argument costs Redis a snprintf per call).
var takeSource = func() string {
	fast, general := body(false)
	return preamble + `
local servertime, tnow, again
local K = KEYS
local n, a, p0 = #K, ARGV[1], 1
local refund = #a > 16 + 32 * n
if n == 1 and not refund then` + fast + `end
` + general
}()

// preamble defines the codecs: the struct library, or plain Lua where the
// server has none.
var preamble = `
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
`

// batchSource is the script of a flight of several Ops (group commit, see
// Store). KEYS holds the flight's keys, each once, in order of first use;
// ARGV[2] on the flight's distinct arguments (takeSource's ARGV[1]), each
// once, except that a window Op of one quota (no refund) is sent without
// its phase (the last 8 bytes: 40 bytes), its phase going into its head;
// ARGV[1] the Ops, one after the other, each as a byte n (its quotas), a
// byte: the index in ARGV of its argument, n bytes: the index in KEYS of
// each quota's key, and 4 bytes: that phase (little-endian; 0 for the
// others); n carries 128 (again) for an Op of one quota whose key a later
// Op reads. Redis makes a Lua string of every key and argument before the
// script runs, and the Ops of a flight usually share a policy, whose
// window Ops differ only in their phase (a hash of the identity): each
// argument is sent, stored and decoded once (the last argument the
// straight path decoded is kept in the reply loop's now, cost, alg, lim,
// w and x0 (the phase apart), kai its index, with its clock reading: an
// Op with that argument neither decodes it nor reads the clock again,
// nor checks it for a refund; the general path, which reads the clock of
// its own argument, makes the next Op decode its argument). Each Op runs
// the same body as takeSource, in the Ops' order: the straight path inline
// in the reply loop (a function call per Op, and copying the kept argument
// in and out of it, cost Redis about 1k instructions per Op: callgrind),
// the general path in a function (one); the server's TIME is read once,
// for the first Op on the server clock, and shared (tnow). Reply: one bulk
// string: a byte m, then m pairs of
// bytes for the Ops not admitted, in order (the Op's index from 0, and 1:
// denied or 2: failed), then tnow as a little-endian 64-bit integer (0:
// no Op read TIME), then per Op the values its quotas read, 40 bytes each
// (40 zero bytes for none: takeSource's states, also for one quota), or
// for a failed Op the length of its error message (little-endian 16-bit)
// and the message. No head per Op: every piece of a reply costs Redis
// about 700 instructions (callgrind), and the client knows each Op's
// quotas and the clock it sent (Store.send; its answer is takeSource's
// r, now negated when denied, and the states).
//
// The batch body reads through got, the flight's values (index in KEYS ->
// value; false: none) filled by one MGET, and every write of a key a
// later Op reads updates it (the head's flag 128 on n: again), so an Op
// reads what the Ops before it in the flight wrote, as it would one call
// later; a key no later Op reads may have its count written alone.
// A key MGET found no string under (none, or a key of another type) is
// read again with GET under redis.pcall, before anything of its Op is
// written: a WRONGTYPE key fails that Op alone (its answer is nil and
// the message), and the others are decided as if they had been sent one by
// one. No other command of an Op can fail alone: a write fails (OOM,
// READONLY) only as a script's first write, before anything was written,
// and then the whole call fails (every Op of the flight gets the error).
//
// Every C function call and global lookup costs Redis hundreds of
// instructions (measured with callgrind): the script reads an Op's head
// with one string.byte, keeps globals in locals, and decodes an argument
// once per flight where it can.
var batchSource = func() string {
	fast, general := body(true)
	return preamble + `
local servertime, tnow
local rpcall = redis.pcall
local A, K = ARGV, KEYS
local h = A[1]
local got = call('MGET', unpack(K))
local Z = string.rep('\0', 40)
local function one(n, ai, at)
  local a, p0 = A[ai], 1
  local refund = #a > 16 + 32 * n
` + general + `
end
local out, odd = {}, {}
local p, j, e, m = 1, 1, #h, 0
local kai, now, cost, alg, lim, w, x0
while p <= e do
  local n, ai, k1, q0, q1, q2, q3 = byte(h, p, p + 6)
  local again = n > 127
  if again then
    n = n - 128
  end
  local rok, rv
  if n == 1 and (ai == kai or #A[ai] <= 48) then
    repeat` + fast + `
    until true
  else
    rok, rv = one(n, ai, p)
    kai = nil
  end
  if not rok then
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
`
}()

// body decides one Op: n quotas, a refund or not, its argument a from
// position p0 on: fast is the straight path (one quota, no refund), for
// the caller to wrap, general the rest. takeSource's returns its reply.
// batch: the Op is one of a flight's (batchSource): its keys are indexed
// through h, its values read and written through got, and its answer is
// whether it admitted the Op and the values read (the states: the reply
// loop adds them to the reply's parts), or nil and an error message; the
// general path (the function one) returns it, the straight path (inline)
// sets rok and rv.
func body(batch bool) (fast, general string) {
	index := func(i string) string { return i }
	read := `
  local v = call('GET', k)
`
	readAll := `
  local vals
  if n == 1 then
    vals = {call('GET', K[1])}
  else
    vals = call('MGET', unpack(K))
  end
`
	args := `
  now, cost, alg, lim, w, x = sunpack('<i8i8i8i8i8i8', a, p0)
`
	wrote, ki := "", "1"
	// What the Op returns: takeSource's reply (r: now, negated when
	// denied, then the states read), or a batch Op's ok and the states
	// read (batchSource makes the reply).
	fastTail, generalTail := replyHead+`
  if v and #v == 40 then
    return r .. v
  end
  return r
`, replyHead+`
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
`
	if batch {
		// A window Op's argument comes without its phase (40 bytes: the
		// Ops of a policy share it), the phase ph in the Op's head.
		args = `
  if ai ~= kai then
    local a, p0 = A[ai], 1
    if #a == 40 then
      now, cost, alg, lim, w = sunpack('<i8i8i8i8i8', a, p0)
      x0 = 0
    else
      now, cost, alg, lim, w, x0 = sunpack('<i8i8i8i8i8i8', a, p0)
    end` + clock + `
    kai = ai
  end
  local x = x0 + q0 + 256 * (q1 + 256 * (q2 + 256 * q3))
`
		ki = "k1"
		index = func(i string) string { return "byte(h, at + 1 + " + i + ")" }
		// GET under redis.pcall: a key of another type fails its Op alone
		// (its answer is nil and the message: break leaves the straight
		// path's repeat block), the flight goes on.
		read = `
  local v = got[ki]
  if not v then
    v = rpcall('GET', k)
    if type(v) == 'table' then
      rok, rv = nil, v.err
      break
    end
    got[ki] = v
  end
`
		// The general path's clock sets servertime: the straight path's
		// kept argument (whose clock it was) is decoded again after it.
		readAll = `
  local vals = {}
  for i = 1, n do
    vals[i] = got[` + index("i") + `]
  end
`
		wrote = `
      got[ki] = val`
		fastTail = `
  rok, rv = ok, Z
  if v and #v == 40 then
    rv = v
  end
`
		generalTail = `
local parts = {}
for i = 1, n do
  local v = vals[i]
  if v and #v == 40 then
    parts[i] = v
  else
    parts[i] = Z
  end
end
return all, table.concat(parts)
`
	} else {
		args = `
  local now, cost, alg, lim, w, x` + args + clock
	}
	// A key with no string value read again with GET (a batch's under
	// redis.pcall, as read).
	reget := `
  for i = 1, n do
    if not vals[i] then
      vals[i] = call('GET', K[` + index("i") + `])
    end
  end
`
	if batch {
		reget = `
  for i = 1, n do
    if not vals[i] then
      local v = rpcall('GET', K[` + index("i") + `])
      if type(v) == 'table' then
        return nil, v.err
      end
      vals[i] = v
    end
  end
`
	}
	return fastPath(args, ki, read, write(wrote, false), write(wrote, true), fastTail),
		generalPath(readAll+reget, index("i"), write(wrote, false), wrote, generalTail)
}

// fastPath: one quota, no refund. args is the Lua that decodes its
// argument, ki the Lua for the index of its key in KEYS, read the Lua that
// reads its value v, wb the token bucket's write and ww the windows' (which
// may write the count alone), tail what it returns (ok, the value read and
// the clock reading in locals). The caller wraps it: takeSource in
// "if n == 1 and not refund", batchSource in a repeat block that read's
// break leaves.
func fastPath(args, ki, read, wb, ww, tail string) string {
	return args + `
  local ki = ` + ki + `
  local k = K[ki]
` + read + decodeState + `
  local ok, na, nb, nc, ttl, bound, slack = false, sa, sb, sc, 0, 0, 0
  if alg == 2 then
` + bucketView + `
    ok = cost <= x and off + cost * w <= tau
    if ok then
      off = off + cost * w
    end
    if ok or norm then
` + bucketState + wb + `
    end
  else
` + windowView + windowFits + `
    if ok then
      curr = curr + cost
    end
    if ok or norm then
` + windowState + ww + `
    end
  end
` + tail
}

// generalPath: several quotas (a first pass decides, a second writes), or a
// refund (one pass). readAll is the Lua that reads the values into vals
// (one per quota, false for none) and then reads a key with no string
// value again with GET, so that a key of another type is a WRONGTYPE error
// (MGET reads it as none) before anything is written; ki the Lua for the
// index in KEYS of quota i's key, w the write, wrote what follows the
// refund's write, tail what it returns (all: whether every quota admitted;
// vals: the values read).
func generalPath(readAll, ki, w, wrote, tail string) string {
	return `
local now, cost, pos
now, cost, pos = sunpack('<i8i8', a, p0)
` + clock + readAll + `
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
    local ki = ` + ki + `
    local k = K[ki]
    local v = vals[i]
` + decodeState + `
    if pass == 1 then
      read[3 * i], read[3 * i + 1], read[3 * i + 2] = sa, sb, sc
    end
    local ok, na, nb, nc, ttl, bound, slack = false, sa, sb, sc, 0, 0, 0
    if alg == 2 then
` + bucketView + `
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
` + bucketState + `
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
` + windowView + `
      if refund then
        if norm then
          na, nb, nc = idx, curr, prev
        end
      else
` + windowFits + `
        if pass == 1 then
          all = all and ok
        end
        if pass == passes and (all or norm) then
          if all then
            curr = curr + cost
          end
` + windowState + `
        end
      end
    end
    if pass == passes then
      if refund then
        -- Only a live state changes; it keeps its expiry and the key its
        -- deadline.
        if ex > now and (na ~= read[3 * i] or nb ~= read[3 * i + 1] or nc ~= read[3 * i + 2]) then
` + encode("ex", "px") + `
          call('SETRANGE', k, '0', val)` + wrote + `
        end
      elseif ttl > 0 then
` + w + `
      end
    end
  end
end
local ok = all
` + tail
}

// replyHead is takeSource's reply head r: now, negated when the Op is
// denied (not ok), packed as a little-endian 64-bit integer. The states
// read follow it.
const replyHead = `
  local r = now
  if not ok then
    r = -now
  end
  r = spack('<i8', r)
`

// clock reads the server's TIME, once, when the caller sent no clock.
const clock = `
  servertime = now == 0
  if servertime then
    if not tnow then
      local t = call('TIME')
      tnow = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
    end
    now = tnow
  end
`

// decodeState reads the value v into sa, sb, sc (the state), ex (its
// expiry) and px (the key's deadline); a dead state reads as zero, its key's
// deadline kept. So does a state whose expiry is further than 2^35 ms
// (397 days, beyond any policy's: MaxRefill plus the clock-step second),
// which only a value written by something else can hold.
const decodeState = `
    local sa, sb, sc, ex, px
    if v and #v == 40 then
      sa, sb, sc, ex, px = sunpack('<i8i8i8i8i8', v)
      if ex <= now or ex - now > 34359738368 then
        sa, sb, sc, ex = 0, 0, 0, 0
      end
    else
      sa, sb, sc, ex, px = 0, 0, 0, 0, 0
    end
`

// bucketView is Quota.tatOffset: off = TAT - now in 1/lim ms, clamped to
// [0, tau]; norm when the clock fell behind a whole bucket (x = burst).
const bucketView = `
      local tau = x * w
      local off, norm = 0, false
      if sa >= now then
        off = (sa - now) * lim + sb
        if off > tau then
          off, norm = tau, true
        end
      end
`

// bucketState is the new token-bucket state for offset off (Quota.gcra):
// TAT = now + floor(off/lim), fraction off mod lim, ttl = max(ceil(off/lim),
// 1); the key's bound is twice the refill time, its slack one refill time
// (in 1/lim ms: tau).
var bucketState = `
` + divmod("q", "r", "off", "lim") + `      na, nb, nc = now + q, r, 0
      ttl = q
      if r > 0 then
        ttl = q + 1
      end
      if ttl < 1 then
        ttl = 1
      end
      slack = tau
      bound = 2 * tau / lim + 2
`

// windowView is Quota.windowView (x = phase): the window idx the decision
// counts in, its start, the instant at it is judged at, the counts curr and
// prev, and norm when the stored window is more than 1 s ahead (read as the
// current one).
var windowView = `
` + divmod("idx", "rem", "now - x", "w") + `      local start, at = idx * w + x, now
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
`

// windowFits is the admission test of Quota.fixed and Quota.sliding.
const windowFits = `
      if alg == 1 then
        ok = cost <= lim - curr
      else
        ok = cost <= lim and prev * (w - (at - start)) + (curr + cost) * w <= lim * w
      end
`

// windowState is the new window state and its ttl (Quota.fixed: to the end
// of the window plus 1 s; Quota.sliding: to the end of the next window).
const windowState = `
      na, nb, nc = idx, curr, prev
      if alg == 1 then
        ttl = start + w - now + 1000
        bound = w + 2000
      else
        ttl = (w - (at - start)) + w + (at - now)
        bound = 2 * w + 1000
      end
`

// write stores (na, nb, nc) with expiry now+ttl, moving the key's deadline
// only when the state would outlive it, or when the recorded deadline is
// beyond the policy's bound (a value written by something else): then to
// the expiry plus the slack (slack/lim ms, rounded up); wrote follows it.
// SETRANGE's offset is the string '0': a number argument costs Redis a
// snprintf per call. partial: when only the count b changed (a window's
// next admission: same window, previous count, expiry and deadline) and no
// later Op of the flight reads the key (again: batchSource), the count's 8
// bytes alone are written (SETRANGE key 8), and got is not updated.
func write(wrote string, partial bool) string {
	count, end := "", ""
	if partial {
		count = `
      if not again and pe == px and e == ex and na == sa and nc == sc then
        local val
        val = spack('<i8', nb)
        call('SETRANGE', k, '8', val)
      else`
		end = `
      end`
	}
	return `
      local e = now + ttl
      local pe = px
      if e > px or px - now > bound then
        pe = e
        if slack > 0 then
` + divmod("s", "sr", "slack", "lim") + `          if sr > 0 then
            s = s + 1
          end
          pe = e + s
        end
      end
` + count + encode("e", "pe") + `      if pe == px then
        call('SETRANGE', k, '0', val)
      elseif servertime then
        call('SET', k, val, 'PXAT', pe)
      else
        call('SET', k, val, 'PX', pe - now)
      end` + wrote + end + `
`
}

// divmod is Lua for q, r = floor(a/b), a mod b (b > 0), exact below 2^53:
// Lua's a % b is a - floor(a/b)*b, and floor(a/b) may round up to the next
// integer; the remainder corrects it, and a - r is then q*b exactly. The
// % operator, not math.floor: a C function call costs Redis hundreds of
// instructions. Lua has no way to share it without creating a closure per
// call, so it is spelled out wherever it is used.
func divmod(q, r, a, b string) string {
	return `
      local ` + r + ` = (` + a + `) % ` + b + `
      local ` + q + ` = ((` + a + `) - ` + r + `) / ` + b + `
      if ` + r + ` < 0 then
        ` + q + `, ` + r + ` = ` + q + ` - 1, ` + r + ` + ` + b + `
      elseif ` + r + ` >= ` + b + ` then
        ` + q + `, ` + r + ` = ` + q + ` + 1, ` + r + ` - ` + b + `
      end
`
}

// encode is Lua for val = the stored value of state (na, nb, nc) with
// expiry ex and key deadline px.
func encode(ex, px string) string {
	return `
      local val
      val = spack('<i8i8i8i8i8', na, nb, nc, ` + ex + `, ` + px + `)
`
}

// takeScript is created once: rueidis sends EVALSHA and falls back to EVAL
// (which also loads the script) on NOSCRIPT, per node.
var takeScript = rueidis.NewLuaScript(takeSource)
