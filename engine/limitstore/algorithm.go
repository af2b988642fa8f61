package limitstore

import "strconv"

// This file holds the pure algorithm math shared by every store (store
// contract v2): given the stored States of the quotas of one Op and the
// current time, Apply decides and updates the States in place. Stores only
// add atomicity and persistence around it; the Redis store's Lua script is a
// line-by-line transcription of the admission and state updates and is
// tested against it.
//
// Every product and sum below stays below 2^53 for the policies New accepts
// (see Policy.resolve), so the Lua transcription, which computes with
// doubles, agrees bit for bit.

// Algorithm selects the math of a [Quota]. The zero value is
// [SlidingWindow].
type Algorithm uint8

const (
	// SlidingWindow (the default) weighs the previous fixed window by the part
	// of it still inside the sliding window: estimate = prev*(W-elapsed)/W + curr.
	SlidingWindow Algorithm = iota
	// FixedWindow counts requests in windows of length Window, each identity
	// with its own phase offset (see Policy.AlignWindows).
	FixedWindow
	// TokenBucket refills Limit tokens per Window up to Burst, implemented as
	// GCRA (generic cell rate algorithm) with a theoretical arrival time (TAT).
	TokenBucket
)

// String returns "sliding-window", "fixed-window" or "token-bucket".
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding-window"
	case FixedWindow:
		return "fixed-window"
	case TokenBucket:
		return "token-bucket"
	case Concurrency:
		return "concurrency"
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// MaxQuotas is the most quotas one Op carries (one policy's quotas).
const MaxQuotas = 4

// clockSkewMS is how far ahead of now a stored window may start and still be
// honoured as it stands (the clock stepped back by at most this much): the
// decision is then taken at the stored window's start and the delays shifted
// to count from the real now. A stored window further ahead is treated as the
// current one (see Quota.windowView).
const clockSkewMS = 1000

// Op is one decision asked of a [Store]: take Cost from every quota, all or
// nothing, or (Refund) give it back. The engine fills it; a store reads it
// during Take and must not keep it, nor any Key, after Take returns.
type Op struct {
	// Refund gives Cost back to each quota (see Quota.Window) instead of
	// taking it.
	Refund bool
	// Peek asks for the Result the same Op would get taken now, with
	// nothing written: Apply decides on copies of the States and reports
	// every TTLMS as 0, so the store creates no key, changes no State and
	// no time to live. Refund is false on a Peek. The engine sends a Peek
	// only to a store that implements Resetter (so a store written before
	// Peek existed never takes one for a Take).
	Peek bool
	// Cost is what the request takes from every quota, >= 0. The engine
	// never sends more than a quota's capacity (Limit, or Burst) plus 1, so
	// a store may assume 0 <= Cost <= capacity+1; Apply denies any Cost
	// above a capacity without arithmetic on it.
	Cost int64
	// N is the number of quotas in Quotas, 1..MaxQuotas.
	N int
	// WaitMS is how long, in milliseconds, the request may wait for a
	// reserved slot (Policy.MaxWait, shortened by the request's deadline);
	// 0: no waiting. A TokenBucket quota that would deny the cost admits
	// it instead when the slot it would be admitted in begins within
	// min(WaitMS, Quota.MaxWaitMS) of now: the TAT moves forward by the
	// cost (the slot is reserved) and QuotaResult.WaitMS says when it
	// begins. Window quotas and Refunds ignore it.
	WaitMS int64
	// Quotas are the quotas the cost is taken from; only the first N count.
	Quotas [MaxQuotas]Quota
	// Block is the identity's block rule (Policy.BlockFor): a store that
	// honours it (Info.Blocks) reads and writes Block.Key in the same
	// atomic step as the quotas and decides with ApplyBlock. The zero
	// value: no rule.
	Block Block
}

// Quota is one limit of an Op and the identity it applies to.
type Quota struct {
	// Key is the store key of this (bucket, quota, identity), laid out as
	// "<prefix>:{<tag>}:<bucket>:<algorithm>:<r|h>:<identity>" (see
	// DESIGN.md, "Store keys"). All keys of one Op share one Redis Cluster
	// hash tag ("{...}"), so one script can touch them all. The bytes are
	// reused after Take returns.
	Key []byte
	// Algorithm selects the math.
	Algorithm Algorithm
	// Limit is the quota per window (requests or cost units), >= 1.
	Limit int64
	// WindowMS is the window length in milliseconds, >= 1.
	WindowMS int64
	// Burst is the TokenBucket capacity, >= 1; unused by the window
	// algorithms.
	Burst int64
	// PhaseMS is the window phase offset in [0, WindowMS): window n of this
	// identity spans [n*WindowMS + PhaseMS, (n+1)*WindowMS + PhaseMS).
	// TokenBucket: 0.
	PhaseMS int64
	// MaxWaitMS is, for a TokenBucket, how far beyond a whole bucket
	// reservations may move the TAT, in milliseconds (the policy's
	// MaxWait; 0: no reservations). It is part of the key's state
	// signature, so every Op on one key carries the same: a TAT up to
	// MaxWaitMS past an empty bucket is reservations, further ahead a
	// backward clock step (see Quota.tatOffset). Below 2^22 (limit.New
	// keeps it at most an hour). Window algorithms: 0.
	MaxWaitMS int64
	// Window is read by Refund only, as returned in QuotaResult.Window:
	// the window index the refunded charge was counted in (window
	// algorithms), or the TAT just after the charge, Unix ms rounded up
	// (TokenBucket).
	Window int64
	// Epoch is read by Refund only, as returned in QuotaResult.Epoch: the
	// epoch of the State the refunded charge was counted in. A Refund
	// whose Epoch is not the stored State's gives this quota nothing back
	// (the identity was reset since the charge: see Resetter).
	Epoch int64
	// Calendar marks a FixedWindow quota whose window the engine names (a
	// calendar day, week, month or year in the policy's time zone): it
	// spans [PhaseMS, PhaseMS+WindowMS), PhaseMS being its start in Unix
	// ms, whatever the store's clock reads, and its window index (State.Window,
	// QuotaResult.Window) is that start. See Quota.calendarView.
	Calendar bool
}

// State is the stored state of one quota of one identity. The zero value is
// a fresh identity. No algorithm uses more than three fields: SlidingWindow
// Window, Count, Prev; FixedWindow Window, Count; TokenBucket TAT, TATFrac.
type State struct {
	// Window is the index of the window Count was admitted in (window
	// algorithms).
	Window int64
	// Count is the cost admitted in window Window.
	Count int64
	// Prev is the cost admitted in window Window-1 (SlidingWindow).
	Prev int64
	// TAT is the TokenBucket theoretical arrival time, Unix ms (its integer
	// part).
	TAT int64
	// TATFrac is TAT's fractional part in units of 1/Limit ms, in
	// [0, Limit): the exact TAT is TAT + TATFrac/Limit ms.
	TATFrac int64
	// Epoch counts the Resets of the State's key (see Resetter): a Reset
	// replaces a live State by State{Epoch: Epoch+1}. Apply keeps it as
	// it is, whatever it writes; it lives and dies with the State, so an
	// absent or expired State is epoch 0.
	Epoch int64
}

// QuotaResult is one quota's part of a Result. Durations are milliseconds,
// rounded up (a delay is never early); Remaining is rounded down.
type QuotaResult struct {
	// Allowed reports whether this quota alone admits the cost.
	Allowed bool
	// Remaining is how many more cost-1 requests this quota admits now
	// (after this request when the whole Op was admitted); never negative.
	Remaining int64
	// ResetAfterMS is the time until this quota is whole again with no
	// further traffic (FixedWindow: the end of the window).
	ResetAfterMS int64
	// RetryAfterMS is, when this quota denies, the earliest time from now at
	// which it admits the same cost with no further traffic; 0 otherwise.
	RetryAfterMS int64
	// Window is the window index the cost counted in (window algorithms),
	// or the TAT after the decision, Unix ms rounded up (TokenBucket), to
	// be passed back in Quota.Window by a Refund.
	Window int64
	// TTLMS is the time to live of the new State, > 0 when the store must
	// write it. For a Refund it is > 0 when the State changed; the store
	// then keeps the key's existing expiry.
	TTLMS int64
	// WaitMS is, for an admitted Op, the time from now until the slot this
	// quota reserved begins (see Op.WaitMS); 0 when admitted at once.
	WaitMS int64
	// Epoch is the epoch of the State decided on (State.Epoch), to be
	// passed back in Quota.Epoch by a Refund.
	Epoch int64
}

// Result is a store's answer for one Op.
type Result struct {
	// Allowed reports that every quota admitted: the cost was taken from
	// all of them. A Refund always reports true.
	Allowed bool
	// NowMS is the store's clock reading used for the decision, Unix ms.
	NowMS int64
	// N is the number of quotas, as in the Op.
	N int
	// Quotas are the quotas' answers, in the Op's order.
	Quotas [MaxQuotas]QuotaResult
	// BlockMS is, for an Op denied by a block (Op.Block), the time left on
	// it in ms: a block in force, or the one this Op began (its length);
	// 0 when no block denied it.
	BlockMS int64
	// BlockStarted reports that this Op began the block (BlockMS long).
	BlockStarted bool
	// BlockTTLMS is, when > 0, the time to live with which the store
	// writes the new block record under Op.Block.Key (see ApplyBlock).
	BlockTTLMS int64
	// Lease is, for an admitted Op whose block rule has a lease
	// (Block.LeaseMS > 0), the lease period its charge counts in among
	// the identity's unsettled ones, to be passed back in Block.Lease by
	// the Refund that settles it.
	Lease int64
	// PendingTTLMS is, when > 0, the time to live with which the store
	// writes the unsettled charges under Op.Block.PendingKey (for a
	// Refund: keeping the key's expiry; see ApplyBlock).
	PendingTTLMS int64
}

// Apply decides op against the N states at now (Unix ms). It is pure: the
// same (op, states, now) always give the same result, which is what lets the
// memory and Redis stores agree bit for bit.
//
// When every quota admits, it takes the cost from each, updating states in
// place, and Result.Allowed is true; the store then writes all N States,
// each with its QuotaResult.TTLMS. Otherwise nothing is taken from any quota
// (retrying while denied never extends a block) and the states are left
// alone, with one exception: a State the clock has fallen far behind (a
// backward clock step, see Quota.windowView and Quota.tatOffset) is
// normalized in place and its TTLMS is > 0, and the store writes it. Every
// other TTLMS of a denied Op is 0: nothing else is written.
//
// For a Refund op it updates the states it can refund and reports Allowed
// with the new numbers; the store writes each State whose TTLMS > 0,
// keeping the key's existing expiry, and never creates a key.
//
// For a Peek op it returns what the same Op taken would return and leaves
// states alone; every TTLMS is 0 (nothing to write).
//
// Every State keeps its Epoch, and each QuotaResult reports it. A Refund
// gives a quota back nothing when its Quota.Epoch is not the State's (the
// charge was made before a Reset of the key) and otherwise answers as any
// Refund.
func (op *Op) Apply(states *[MaxQuotas]State, now int64) (res Result) {
	op.ApplyTo(&res, states, now)
	return res
}

// ApplyTo is Apply writing its Result into *res, every field of it: what a
// Store's Take uses to answer into the caller's Result without a copy.
func (op *Op) ApplyTo(res *Result, states *[MaxQuotas]State, now int64) {
	*res = Result{}
	var epochs [MaxQuotas]int64
	for i := range min(max(op.N, 0), MaxQuotas) {
		epochs[i] = states[i].Epoch
	}
	op.apply(res, states, now)
	for i := range min(max(op.N, 0), MaxQuotas) {
		states[i].Epoch, res.Quotas[i].Epoch = epochs[i], epochs[i]
	}
}

// apply is Apply into *res, a zero Result, with the States' epochs left
// to it. (Filling the caller's Result in place spares a copy of its few
// hundred bytes per decision.)
func (op *Op) apply(res *Result, states *[MaxQuotas]State, now int64) {
	if op.Peek {
		op.peek(res, states, now)
		return
	}
	n := min(max(op.N, 0), MaxQuotas)
	res.NowMS, res.N = now, n
	switch {
	case op.Refund:
		for i := range n {
			cost := op.Cost
			if op.Quotas[i].Epoch != states[i].Epoch {
				cost = 0 // charged before a Reset: nothing of it is left
			}
			op.Quotas[i].refund(&res.Quotas[i], &states[i], cost, now)
		}
		res.Allowed = true
		return
	case n == 1:
		// One quota: its own answer decides, in one pass.
		op.Quotas[0].decide(&res.Quotas[0], &states[0], op.Cost, op.WaitMS, now, takeIfAdmitted)
		res.Allowed = res.Quotas[0].Allowed
		return
	}
	// First every quota's answer with nothing taken; only when all of them
	// admit is the cost taken, from each.
	all := n > 0
	for i := range n {
		op.Quotas[i].decide(&res.Quotas[i], &states[i], op.Cost, op.WaitMS, now, probe)
		all = all && res.Quotas[i].Allowed
	}
	if all {
		for i := range n {
			op.Quotas[i].decide(&res.Quotas[i], &states[i], op.Cost, op.WaitMS, now, take)
		}
	}
	res.Allowed = all
}

// peek is apply for a Peek: the take's answer on copies of the states,
// with nothing to write.
func (op *Op) peek(res *Result, states *[MaxQuotas]State, now int64) {
	take, view := *op, *states
	take.Peek, take.Refund = false, false
	*res = take.Apply(&view, now)
	for i := range res.N {
		res.Quotas[i].TTLMS = 0
	}
}

// capacity is the most a single request can take: Limit, or Burst for a
// TokenBucket.
func (q *Quota) capacity() int64 {
	if q.Algorithm == TokenBucket {
		return q.Burst
	}
	return q.Limit
}

// mode says whether Quota.decide takes the cost.
type mode uint8

const (
	// probe takes nothing: the answer says whether this quota alone would
	// admit the cost.
	probe mode = iota
	// take takes the cost (every quota of the Op admits it).
	take
	// takeIfAdmitted takes the cost when this quota admits it (the Op's
	// only quota): probe and take in one pass.
	takeIfAdmitted
)

// admits reports whether m takes the cost, given whether the quota admits it.
func (m mode) admits(allowed bool) bool { return m == take || m == takeIfAdmitted && allowed }

// decide writes this quota's answer at now into *r (every field). When m
// takes the cost it writes the new State into *s; otherwise *s changes only
// when the clock has fallen far behind it (normalized, with TTLMS > 0).
// wait is the Op's WaitMS (TokenBucket only).
func (q *Quota) decide(r *QuotaResult, s *State, cost, wait, now int64, m mode) {
	switch q.Algorithm {
	case FixedWindow:
		q.fixed(r, s, cost, now, m)
	case TokenBucket:
		q.gcra(r, s, cost, wait, now, m)
	default:
		q.sliding(r, s, cost, now, m)
	}
}

// floorDiv is a / b rounded towards negative infinity, b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// windowView is a window quota's state as seen at now.
type windowView struct {
	idx   int64 // the window the decision counts in
	start int64 // its start, Unix ms
	// at is the instant the decision is computed at: now, or the start of
	// a stored window up to clockSkewMS ahead of now (the clock stepped
	// back a little); the delays are then shifted by at-now so that they
	// count from the real now.
	at         int64
	curr, prev int64 // cost admitted in window idx and idx-1
	// norm: the stored window was more than clockSkewMS ahead of now and
	// is read as window idx (the State needs writing as such).
	norm bool
}

// windowView reads s at now, with the clock-step rules. A stored window that
// starts at most clockSkewMS after now (the clock stepped back by up to
// 1 s) is honoured as it stands: the decision is taken at its start and the
// delays count from now, so they grow by at most clockSkewMS. A stored window
// further ahead is read as the current one, its counts carried over (norm):
// nothing admitted is forgotten and no client waits longer than the
// policy's own maximum. That reading is written back even when the request
// is denied; otherwise every later request would derive it again from the
// future window, and the client would wait for the whole step. A forward
// step simply starts a new window.
func (q *Quota) windowView(v *windowView, s *State, now int64) {
	if q.Calendar {
		q.calendarView(v, s, now)
		return
	}
	w := q.WindowMS
	idx := floorDiv(now-q.PhaseMS, w)
	*v = windowView{idx: idx, start: idx*w + q.PhaseMS, at: now}
	stored := s.Window
	if stored > idx {
		start := stored*w + q.PhaseMS
		if start-now <= clockSkewMS {
			v.idx, v.start, v.at = stored, start, start
		} else {
			stored, v.norm = idx, true
		}
	}
	switch stored {
	case v.idx:
		v.curr, v.prev = s.Count, s.Prev
	case v.idx - 1:
		v.prev = s.Count
	}
	if q.Algorithm == FixedWindow {
		v.prev = 0
	}
}

func (q *Quota) fixed(r *QuotaResult, s *State, cost, now int64, m mode) {
	var v windowView
	q.windowView(&v, s, now)
	reset := v.start + q.WindowMS - now
	if q.Calendar {
		reset = calendarReset(reset, q.WindowMS)
	}
	allowed := cost <= q.Limit-v.curr
	admit := m.admits(allowed)
	*r = QuotaResult{Allowed: allowed, Window: v.idx, ResetAfterMS: reset}
	count := v.curr
	if admit {
		count += cost
	}
	if admit || v.norm {
		*s = State{Window: v.idx, Count: count}
		r.TTLMS = reset + 1000
	}
	r.Remaining = max(q.Limit-count, 0)
	if !admit && !allowed {
		r.RetryAfterMS = reset
	}
}

func (q *Quota) sliding(r *QuotaResult, s *State, cost, now int64, m mode) {
	w, limit := q.WindowMS, q.Limit
	var v windowView
	q.windowView(&v, s, now)
	e := v.at - v.start // elapsed in the window, 0 <= e < w
	toEnd := w - e
	skew := v.at - now
	weighted := v.prev * toEnd
	curr, prev := v.curr, v.prev
	allowed := cost <= limit && weighted+(curr+cost)*w <= limit*w
	admit := m.admits(allowed)
	*r = QuotaResult{Allowed: allowed, Window: v.idx}
	if admit {
		curr += cost
	}
	if admit || v.norm {
		*s = State{Window: v.idx, Count: curr, Prev: prev}
		r.TTLMS = toEnd + w + skew
	}
	r.Remaining = max(floorDiv(limit*w-weighted, w)-curr, 0)
	// Reset: the estimate is back to zero when the current window's count
	// stops counting, one window after the current one ends.
	switch {
	case curr > 0:
		r.ResetAfterMS = toEnd + w + skew
	case prev > 0:
		r.ResetAfterMS = toEnd + skew
	}
	if admit || allowed {
		return
	}
	switch {
	case cost > limit:
		// Never admissible: point at the moment the whole quota is back.
		r.RetryAfterMS = max(r.ResetAfterMS, 1)
	case curr+cost <= limit:
		// Admissible later in this window, once prev's weight has decayed:
		// the smallest e' with prev*(w-e') <= (limit-curr-cost)*w. Here
		// prev > 0, or the cost would fit.
		r.RetryAfterMS = w - (limit-curr-cost)*w/prev - e + skew
	default:
		// Not before the next window, where prev' = curr and curr' = 0: the
		// smallest e” with curr*(w-e”) <= (limit-cost)*w.
		r.RetryAfterMS = toEnd + max(w-(limit-cost)*w/curr, 0) + skew
	}
}

// tatOffset is the TokenBucket's TAT minus now in units of 1/Limit ms,
// clamped to [0, Burst*WindowMS + MaxWaitMS*Limit]: 0 is a full bucket,
// Burst*WindowMS an empty one, and beyond it the slots reserved by waiting
// requests (at most MaxWaitMS of them). In these units the emission
// interval WindowMS/Limit ms is exactly WindowMS, so no rate needs
// rounding.
//
// clamped reports the clock-step rule: a TAT further ahead than a whole
// bucket and its reservations exists only after the clock stepped back; it
// is read as an empty bucket with every reservation taken (nothing admitted
// or reserved is forgotten, and no client waits longer than the bucket's
// refill time plus MaxWait), and that reading is written back even when the
// request is denied (see windowView for why).
func (q *Quota) tatOffset(s *State, now int64) (off int64, clamped bool) {
	d := s.TAT - now
	if d < 0 {
		return 0, false
	}
	h := q.Burst*q.WindowMS + q.MaxWaitMS*q.Limit
	if d > h/q.Limit { // d*Limit+TATFrac > h, decided without the product
		return h, true
	}
	off = d*q.Limit + s.TATFrac
	if off > h {
		return h, true
	}
	return off, false
}

// gcra is the token bucket as GCRA in units of 1/Limit ms: emission interval
// WindowMS, bucket tolerance tau = Burst*WindowMS, offset = TAT - now. A
// cost the bucket cannot take now is admitted with a reservation when the
// instant it could, with no further traffic, is at most min(wait,
// MaxWaitMS) ms away: the TAT moves forward by the cost as for any
// admission, and WaitMS is that instant. A later request then reserves
// the slot after it, so waiting requests are served in the order they
// reserved, one emission interval per cost unit apart.
func (q *Quota) gcra(r *QuotaResult, s *State, cost, wait, now int64, m mode) {
	lim, t := q.Limit, q.WindowMS
	tau := q.Burst * t
	off, clamped := q.tatOffset(s, now)
	need := off + cost*t - tau // > 0: the bucket lacks it now
	allowed := cost <= q.Burst && need <= min(max(wait, 0), q.MaxWaitMS)*lim
	admit := m.admits(allowed)
	*r = QuotaResult{Allowed: allowed}
	if admit {
		off += cost * t
		r.WaitMS = ceilDiv(need, lim)
	}
	if admit || clamped {
		*s = State{TAT: now + off/lim, TATFrac: off % lim}
		r.TTLMS = max(ceilDiv(off, lim), 1)
	}
	r.Window = now + ceilDiv(off, lim) // the TAT, rounded up: what a Refund gives back depends on it
	r.Remaining = max(tau-off, 0) / t
	r.ResetAfterMS = ceilDiv(off, lim)
	switch {
	case admit || allowed:
	case cost > q.Burst:
		// Never admissible: point at the moment the whole quota is back.
		r.RetryAfterMS = max(r.ResetAfterMS, 1)
	default:
		r.RetryAfterMS = ceilDiv(off+cost*t-tau, lim)
	}
}

// refund gives cost back to the charge recorded in s (see Op.Refund) and
// answers with the quota's numbers at now. Window algorithms refund only a
// charge whose window the state still holds (Quota.Window is the state's
// window, or for SlidingWindow the one before); never below zero; an expired
// or rolled window is left alone. TokenBucket: TAT = max(TAT - g, now), where
// g is what is left of the charge at now: cost*T, or less once now is within
// cost*T of the charge's TAT (Quota.Window), none once now has passed it.
// A state the clock has fallen far behind is then normalized as a take
// would (windowView, tatOffset), so that the numbers hold.
//
// A reservation (see Op.WaitMS) whose request gives up before its slot is
// given back by the same Refund, with the Window of its admission: when it
// is the latest reservation (its Window is the state's TAT, rounded up)
// its slot is still ahead, so all of its cost comes back, exactly, and the
// next request reserves the slot it freed. A charge, reservation or not,
// that a reservation still ahead followed gives nothing back: the TAT
// alone cannot hold a gap between reservations, and moving it back would
// give the next request the latest reservation's slot a second time (the
// freed slot passes unused instead; a Limiter gives back its own latest
// reservation, see the engine's waiting line).
func (q *Quota) refund(r *QuotaResult, s *State, cost, now int64) {
	before := *s
	switch q.Algorithm {
	case TokenBucket:
		if off, _ := q.tatOffset(s, now); off > 0 {
			// Only what is left of the charge: it ends at its TAT
			// (q.Window, ms rounded up), and the part of it before now
			// has refilled already; a charge the bucket has refilled
			// past gives back nothing (not the tokens of later
			// requests).
			g := min(cost, q.Burst) * q.WindowMS
			if d := q.Window - now; d <= 0 {
				g = 0
			} else if d <= g/q.Limit {
				g = d * q.Limit
			}
			if off > q.Burst*q.WindowMS && now+ceilDiv(off, q.Limit) != q.Window {
				// A reservation still ahead (the TAT past a whole
				// bucket) that is not this charge (whose TAT, rounded
				// up, is not the state's) holds its instant: moving the
				// TAT back would give the next request that slot a
				// second time. Nothing comes back.
				g = 0
			}
			off = max(off-g, 0)
			s.TAT, s.TATFrac = now+off/q.Limit, off%q.Limit
		}
	default:
		switch {
		case q.Window == s.Window:
			s.Count = max(s.Count-cost, 0)
		case q.Window == s.Window-1 && q.Algorithm == SlidingWindow:
			s.Prev = max(s.Prev-cost, 0)
		}
		var v windowView
		if q.windowView(&v, s, now); v.norm {
			*s = State{Window: v.idx, Count: v.curr, Prev: v.prev}
		}
	}
	// The numbers at now: a cost-0 request admitted on a copy.
	view := *s
	q.decide(r, &view, 0, 0, now, take)
	r.Allowed, r.RetryAfterMS, r.WaitMS = true, 0, 0
	if *s == before {
		r.TTLMS = 0 // nothing to write
	}
}

// ceilDiv is a / b rounded up, for a > 0 and b > 0; 0 for a <= 0.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}
