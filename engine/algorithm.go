package limit

// This file holds the pure algorithm math shared by every store: given the
// stored State of one (bucket, identity), the current time and the Op, Apply
// returns the new State and the Result. Stores only add atomicity and
// persistence around it (the Redis store's Lua scripts are a line-by-line
// transcription and are tested against it).

// Op is one decision asked of a [Store]. The engine fills it; a store reads it
// during Take and must not keep it, nor Key, after Take returns.
type Op struct {
	// Key is the store key of this (bucket, identity), laid out as
	// "<prefix>:{<tag>}:<bucket>:<algorithm>:<r|h>:<identity>" (see DESIGN.md,
	// "Store keys"). The bytes are reused after Take returns.
	Key []byte
	// Hash is a 64-bit FNV-1a digest of (bucket, identity); stores may use it
	// to pick a shard instead of hashing Key again.
	Hash uint64
	// Algorithm selects the math.
	Algorithm Algorithm
	// Limit is the quota per window (requests or cost units), >= 1.
	Limit int64
	// Burst is the TokenBucket capacity, >= 1; unused by the window algorithms.
	Burst int64
	// WindowMS is the window length in milliseconds, >= 1.
	WindowMS int64
	// IntervalMS is the TokenBucket emission interval, WindowMS / Limit.
	IntervalMS int64
	// PhaseMS is the window phase offset in [0, WindowMS): window n of this
	// identity spans [n*WindowMS + PhaseMS, (n+1)*WindowMS + PhaseMS).
	PhaseMS int64
	// Cost is what this request takes, from 0 to capacity+1 (Limit+1, or
	// Burst+1 for TokenBucket): the engine clamps larger costs to capacity+1,
	// which is always denied, so no product can overflow.
	Cost int64
}

// State is the stored state of one (bucket, identity). The zero value is a
// fresh identity.
type State struct {
	// Window is the index of the current window (window algorithms).
	Window int64
	// Count is the cost admitted in window Window.
	Count int64
	// Prev is the cost admitted in window Window-1 (SlidingWindow).
	Prev int64
	// TAT is the theoretical arrival time in Unix ms (TokenBucket).
	TAT int64
}

// Result is a store's answer for one Op. Durations are milliseconds.
type Result struct {
	// Allowed reports whether the request was admitted (and its cost taken).
	Allowed bool
	// Remaining is how many more cost-1 requests would be admitted right now
	// after this one; never negative.
	Remaining int64
	// ResetAfterMS is the time until the whole quota is available again with
	// no further traffic (FixedWindow: the end of the window).
	ResetAfterMS int64
	// RetryAfterMS is, for a denied request, the earliest time from now at
	// which the same request would be admitted with no further traffic
	// (exact, rounded up to the ms); 0 when allowed.
	RetryAfterMS int64
	// NowMS is the store's clock reading used for the decision, Unix ms.
	NowMS int64
	// TTLMS is how long the store keeps the new State (> 0 when Allowed).
	TTLMS int64
}

// floorDiv is a / b rounded towards negative infinity, b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// window returns the index and start of the window that contains now, and
// the instant the decision is computed at: now itself, or, when the clock went
// backwards behind the stored window, the start of the stored window (the
// delays are then shifted back to the real now, see shift).
func (op *Op) window(s State, now int64) (idx, start, at int64) {
	idx = floorDiv(now-op.PhaseMS, op.WindowMS)
	if idx < s.Window {
		idx = s.Window
		start = idx*op.WindowMS + op.PhaseMS
		return idx, start, start
	}
	return idx, idx*op.WindowMS + op.PhaseMS, now
}

// Apply computes one decision. It is pure: the same (s, now, op) always give
// the same result, which is what lets the memory and Redis stores agree bit for
// bit. A denied request leaves the state unchanged (the returned State equals
// s), so retrying while denied never extends a block.
func (op *Op) Apply(s State, now int64) (State, Result) {
	switch op.Algorithm {
	case FixedWindow:
		return op.fixed(s, now)
	case TokenBucket:
		return op.gcra(s, now)
	}
	return op.sliding(s, now)
}

// shift adds skew = at - now (> 0 only when the clock went backwards behind
// the stored window) to the delays and the TTL computed at at, so that they
// count from the real now: a client told to retry after RetryAfterMS is
// admitted exactly then, not skew early.
func (res *Result) shift(skew int64) {
	if skew <= 0 {
		return
	}
	res.ResetAfterMS += skew
	if res.RetryAfterMS > 0 {
		res.RetryAfterMS += skew
	}
	if res.TTLMS > 0 {
		res.TTLMS += skew
	}
}

func (op *Op) fixed(s State, now int64) (State, Result) {
	w := op.WindowMS
	idx, start, at := op.window(s, now)
	count := int64(0)
	if s.Window == idx {
		count = s.Count
	}
	res := Result{NowMS: now, ResetAfterMS: start + w - at}
	if op.Cost <= op.Limit-count {
		count += op.Cost
		res.Allowed = true
		res.Remaining = op.Limit - count
		res.TTLMS = res.ResetAfterMS + 1000
		res.shift(at - now)
		return State{Window: idx, Count: count}, res
	}
	res.Remaining = max(op.Limit-count, 0)
	res.RetryAfterMS = res.ResetAfterMS
	res.shift(at - now)
	return s, res
}

func (op *Op) sliding(s State, now int64) (State, Result) {
	w, limit, cost := op.WindowMS, op.Limit, op.Cost
	idx, start, at := op.window(s, now)
	var curr, prev int64
	switch s.Window {
	case idx:
		curr, prev = s.Count, s.Prev
	case idx - 1:
		prev = s.Count
	}
	e := at - start // elapsed in the current window, 0 <= e < w
	toEnd := w - e
	// Allowed iff prev*(w-e)/w + curr + cost <= limit, exactly:
	// prev*(w-e) + (curr+cost)*w <= limit*w. Every term is below 2^53.
	weighted := prev * toEnd
	res := Result{NowMS: now}
	if weighted+(curr+cost)*w <= limit*w {
		curr += cost
		res.Allowed = true
		res.Remaining = max(floorDiv(limit*w-weighted, w)-curr, 0)
		res.ResetAfterMS = slidingReset(curr, prev, toEnd, w)
		res.TTLMS = toEnd + w
		res.shift(at - now)
		return State{Window: idx, Count: curr, Prev: prev}, res
	}
	res.Remaining = max(floorDiv(limit*w-weighted, w)-curr, 0)
	res.ResetAfterMS = slidingReset(curr, prev, toEnd, w)
	switch {
	case cost > limit:
		// Never admissible: set after the shift, below.
	case curr+cost <= limit:
		// Admissible later in this window, once prev's weight has decayed:
		// the smallest e' with prev*(w-e') <= (limit-curr-cost)*w. Here
		// prev > 0, or the request would have been admitted.
		ePrime := w - (limit-curr-cost)*w/prev
		res.RetryAfterMS = ePrime - e
	default:
		// Not before the next window, where prev' = curr and curr' = 0: the
		// smallest e” with curr*(w-e”) <= (limit-cost)*w.
		e2 := max(w-(limit-cost)*w/curr, 0)
		res.RetryAfterMS = toEnd + e2
	}
	res.shift(at - now)
	if cost > limit {
		// Never admissible: point at the moment the whole quota is back.
		res.RetryAfterMS = max(res.ResetAfterMS, 1)
	}
	return s, res
}

// slidingReset is the time until the estimate is back to zero: the current
// window's count stops counting one window after the current one ends.
func slidingReset(curr, prev, toEnd, w int64) int64 {
	switch {
	case curr > 0:
		return toEnd + w
	case prev > 0:
		return toEnd
	}
	return 0
}

func (op *Op) gcra(s State, now int64) (State, Result) {
	t := op.IntervalMS
	tau := op.Burst * t // the bucket's capacity, in ms of emission
	tat := max(s.TAT, now)
	res := Result{NowMS: now}
	newTAT := tat + op.Cost*t
	if newTAT-now <= tau {
		res.Allowed = true
		res.Remaining = (tau - (newTAT - now)) / t
		res.ResetAfterMS = newTAT - now
		res.TTLMS = max(newTAT-now, 1)
		return State{TAT: newTAT}, res
	}
	res.RetryAfterMS = newTAT - tau - now
	if op.Cost > op.Burst {
		// Never admissible: point at the moment the whole quota is back.
		res.RetryAfterMS = max(tat-now, 1)
	}
	res.Remaining = max((tau-(tat-now))/t, 0)
	res.ResetAfterMS = tat - now
	return s, res
}
