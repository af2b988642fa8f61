package limit

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
)

// The reference models below keep their own representation of a quota (a
// map of per-window totals; a token bucket's fill level) and find every
// number by brute force: Remaining by trying costs 1, 2, ... until one does
// not fit, RetryAfter and ResetAfter by scanning forward one millisecond at
// a time with the state frozen (a denied request writes nothing). They share
// no code with Op.Apply, so an agreement over long random sequences (several
// quotas, refunds, clock steps both ways, costs 0..capacity+1) is evidence,
// not tautology. The rules they encode are the documented ones (DESIGN.md,
// Algorithms): the sliding-window estimate, the token bucket's refill, and
// the clock-step rules (a stored window up to 1 s ahead is honoured as it
// stands; further ahead it is read as the current window and written back;
// a token bucket never holds less than nothing).

// refQuota is a brute-force model of one quota.
type refQuota interface {
	capacity() int64
	// fits reports whether cost would be admitted at t.
	fits(t, cost int64) bool
	// normalize applies the clock-step reading at t to the stored state and
	// reports whether it changed it (the store must then write it).
	normalize(t int64) bool
	// admit takes cost at t and returns the window it counted in.
	admit(t, cost int64) int64
	// refund gives cost back to a charge counted in window win, reporting
	// whether the state changed.
	refund(t, cost, win int64) bool
	// window is the window a request at t counts in (0 for a bucket).
	window(t int64) int64
	// whole reports whether the quota is back to a fresh state at t.
	whole(t int64) bool
	// resetAfter is the time from t until the quota is whole again.
	resetAfter(t int64) int64
	// ttlBound is the longest time to live a state may get.
	ttlBound() int64
}

// remaining is how many cost-1 requests m admits at t: the largest n that
// fits.
func remaining(m refQuota, t int64) int64 {
	n := int64(0)
	for n < m.capacity() && m.fits(t, n+1) {
		n++
	}
	return n
}

// retryAfter scans forward for the first instant cost fits, the state
// frozen; a cost above the capacity points at the whole quota's return.
func retryAfter(tb testing.TB, m refQuota, t, cost int64) int64 {
	if cost > m.capacity() {
		return max(m.resetAfter(t), 1)
	}
	for dt := int64(1); dt < 1<<22; dt++ {
		if m.fits(t+dt, cost) {
			return dt
		}
	}
	tb.Fatalf("model: cost %d never fits after %d", cost, t)
	return 0
}

// refWindow models FixedWindow and SlidingWindow with a map of per-window
// totals and the index of the latest window written.
type refWindow struct {
	sliding         bool
	limit, w, phase int64
	stored          int64           // the window of the stored state
	total           map[int64]int64 // cost admitted per window index
}

func newRefWindow(sliding bool, limit, w, phase int64) *refWindow {
	return &refWindow{sliding: sliding, limit: limit, w: w, phase: phase, total: map[int64]int64{}}
}

func floorDivRef(a, b int64) int64 {
	if a >= 0 {
		return a / b
	}
	return -((-a + b - 1) / b)
}

func (m *refWindow) capacity() int64   { return m.limit }
func (m *refWindow) idx(t int64) int64 { return floorDivRef(t-m.phase, m.w) }
func (m *refWindow) start(i int64) int64 {
	return i*m.w + m.phase
}

// read returns the window a request at t counts in, the instant it is
// judged at, the totals of that window and the one before, and whether the
// stored window is far ahead (read as the current one).
func (m *refWindow) read(t int64) (win, at, curr, prev int64, far bool) {
	win, at = m.idx(t), t
	from := win // the window whose totals are curr
	if m.stored > win {
		if m.start(m.stored)-t <= 1000 {
			win, at, from = m.stored, m.start(m.stored), m.stored
		} else {
			far, from = true, m.stored
		}
	}
	switch from {
	case m.stored:
		curr, prev = m.total[m.stored], m.total[m.stored-1]
	case m.stored + 1:
		prev = m.total[m.stored]
	}
	if !m.sliding {
		prev = 0
	}
	return win, at, curr, prev, far
}

func (m *refWindow) fits(t, cost int64) bool {
	win, at, curr, prev, _ := m.read(t)
	if !m.sliding {
		return curr+cost <= m.limit
	}
	// prev*(w-e)/w + curr + cost <= limit, in integers.
	e := at - m.start(win)
	return prev*(m.w-e)+(curr+cost)*m.w <= m.limit*m.w
}

func (m *refWindow) normalize(t int64) bool {
	win, _, curr, prev, far := m.read(t)
	if !far {
		return false
	}
	m.total = map[int64]int64{win: curr, win - 1: prev}
	m.stored = win
	return true
}

func (m *refWindow) admit(t, cost int64) int64 {
	m.normalize(t)
	win, _, _, _, _ := m.read(t)
	if win < m.stored-1 || win > m.stored+1 {
		m.total = map[int64]int64{}
	}
	if win > m.stored {
		m.stored = win
	}
	m.total[win] += cost
	return win
}

func (m *refWindow) refund(_, cost, win int64) bool {
	if win != m.stored && (!m.sliding || win != m.stored-1) {
		return false
	}
	if m.total[win] == 0 || cost == 0 {
		return false
	}
	m.total[win] = max(m.total[win]-cost, 0)
	return true
}

func (m *refWindow) window(t int64) int64 { win, _, _, _, _ := m.read(t); return win }

func (m *refWindow) whole(t int64) bool {
	_, _, curr, prev, _ := m.read(t)
	return curr == 0 && prev == 0
}

func (m *refWindow) resetAfter(t int64) int64 {
	if !m.sliding { // the end of the window
		win, _, _, _, _ := m.read(t)
		return m.start(win+1) - t
	}
	for dt := int64(0); ; dt++ {
		if m.whole(t + dt) {
			return dt
		}
	}
}

func (m *refWindow) ttlBound() int64 {
	if m.sliding {
		return 2*m.w + 1000
	}
	return m.w + 2000
}

// refBucket models a token bucket by its fill level, in units where a token
// is w units and the bucket refills limit units per ms: capacity burst*w.
// The level at t counts from the level at t0, forwards or (after the clock
// stepped back) backwards, never above the capacity.
type refBucket struct {
	limit, burst, w int64
	level, t0       int64
}

func newRefBucket(limit, burst, w int64) *refBucket {
	return &refBucket{limit: limit, burst: burst, w: w, level: burst * w}
}

func (m *refBucket) capacity() int64 { return m.burst }

// at returns the level at t, and whether it would be below empty (only
// after a backward clock step).
func (m *refBucket) at(t int64) (int64, bool) {
	full := m.burst * m.w
	if t >= m.t0 {
		if t-m.t0 >= (full-m.level+m.limit-1)/m.limit {
			return full, false
		}
		return m.level + (t-m.t0)*m.limit, false
	}
	if lv := m.level - (m.t0-t)*m.limit; lv >= 0 {
		return lv, false
	}
	return 0, true
}

func (m *refBucket) fits(t, cost int64) bool {
	lv, _ := m.at(t)
	return cost <= m.burst && lv >= cost*m.w
}

func (m *refBucket) normalize(t int64) bool {
	lv, below := m.at(t)
	if below {
		m.level, m.t0 = lv, t
	}
	return below
}

func (m *refBucket) admit(t, cost int64) int64 {
	lv, _ := m.at(t)
	m.level, m.t0 = lv-cost*m.w, t
	return m.window(t)
}

// refund gives back what is left at t of a charge whose bucket was empty
// down to win (the TAT after it, ms rounded up): the charge's last
// min(cost, burst) tokens, less what the bucket has refilled past win - t.
func (m *refBucket) refund(t, cost, win int64) bool {
	lv, below := m.at(t)
	full := m.burst * m.w
	if lv == full {
		return false
	}
	g := min(cost, m.burst) * m.w
	if win <= t {
		g = 0
	} else {
		g = min(g, (win-t)*m.limit)
	}
	m.level, m.t0 = min(lv+g, full), t
	return below || g > 0
}

// window is the TAT at t, ms rounded up: t plus the time the missing level
// takes to refill.
func (m *refBucket) window(t int64) int64 {
	lv, _ := m.at(t)
	return t + (m.burst*m.w-lv+m.limit-1)/m.limit
}
func (m *refBucket) whole(t int64) bool {
	lv, _ := m.at(t)
	return lv == m.burst*m.w
}

func (m *refBucket) resetAfter(t int64) int64 {
	for dt := int64(0); ; dt++ {
		if m.whole(t + dt) {
			return dt
		}
	}
}

func (m *refBucket) ttlBound() int64 {
	return max((m.burst*m.w+m.limit-1)/m.limit, 1)
}

// refOp runs one Op through the models: the expected Result, and for each
// quota whether the store must write its state.
func refOp(tb testing.TB, ms []refQuota, op *Op, t int64) (Result, [MaxQuotas]bool) {
	res := Result{NowMS: t, N: len(ms)}
	var write [MaxQuotas]bool
	cost := op.Cost
	if op.Refund {
		res.Allowed = true
		for i, m := range ms {
			write[i] = m.refund(t, cost, op.Quotas[i].Window)
			write[i] = m.normalize(t) || write[i]
			res.Quotas[i] = QuotaResult{Allowed: true, Remaining: remaining(m, t), ResetAfterMS: m.resetAfter(t), Window: m.window(t)}
		}
		return res, write
	}
	all := true
	for _, m := range ms {
		all = all && m.fits(t, cost)
	}
	res.Allowed = all
	for i, m := range ms {
		q := &res.Quotas[i]
		if all {
			q.Allowed, q.Window, write[i] = true, m.admit(t, cost), true
		} else {
			write[i] = m.normalize(t)
			q.Allowed, q.Window = m.fits(t, cost), m.window(t)
			if !q.Allowed {
				q.RetryAfterMS = retryAfter(tb, m, t, cost)
			}
		}
		q.Remaining, q.ResetAfterMS = remaining(m, t), m.resetAfter(t)
	}
	return res, write
}

// randomQuota returns a random quota (small numbers, so that the models'
// scans stay short) and its model.
func randomQuota(rng *rand.Rand, alg Algorithm) (Quota, refQuota) {
	limit := 1 + rng.Int64N(6)
	w := 1 + rng.Int64N(40)
	q := Quota{Algorithm: alg, Limit: limit, WindowMS: w}
	if alg == TokenBucket {
		q.Burst = 1 + rng.Int64N(6)
		return q, newRefBucket(limit, q.Burst, w)
	}
	q.PhaseMS = rng.Int64N(w)
	return q, newRefWindow(alg == SlidingWindow, limit, w, q.PhaseMS)
}

// TestApplyAgainstReferenceModels drives random sequences of Ops (1 to 4
// quotas of mixed algorithms, costs 0..capacity+1, refunds of earlier
// charges, clock steps forwards and backwards, small and large) through
// Op.Apply and the models, and compares every field of every Result, which
// states are written, and the time to live of each written state.
func TestApplyAgainstReferenceModels(t *testing.T) {
	const steps = 40_000
	for _, mix := range []string{"fixed-window", "sliding-window", "token-bucket", "mixed"} {
		t.Run(mix, func(t *testing.T) {
			t.Parallel()
			seed := uint64(len(mix)) * 7919
			rng := rand.New(rand.NewPCG(seed, 42))
			var (
				op      Op
				sts     [MaxQuotas]State
				models  []refQuota
				now     int64
				charges []Op // admitted Ops, to refund later
				counts  [4]int
			)
			reset := func() {
				op = Op{N: 1 + rng.IntN(MaxQuotas)}
				models = models[:0]
				for i := range op.N {
					alg := map[string]Algorithm{"fixed-window": FixedWindow, "sliding-window": SlidingWindow, "token-bucket": TokenBucket}[mix]
					if mix == "mixed" {
						alg = Algorithm(rng.IntN(3))
					}
					var m refQuota
					op.Quotas[i], m = randomQuota(rng, alg)
					models = append(models, m)
				}
				sts = [MaxQuotas]State{}
				now = 1_000_000 + rng.Int64N(1_000_000)
				charges = charges[:0]
			}
			reset()
			for i := range steps {
				if i%400 == 0 {
					reset()
				}
				w := op.Quotas[rng.IntN(op.N)].WindowMS
				switch r := rng.IntN(100); {
				case r < 30:
				case r < 55:
					now += 1 + rng.Int64N(3)
				case r < 85:
					now += rng.Int64N(2 * w)
				case r < 90:
					now += 1000 + rng.Int64N(3000) // forward step
				case r < 96:
					now -= 1 + rng.Int64N(1100) // back, mostly within 1 s
				default:
					now -= 1000 + rng.Int64N(5000) // back, further than 1 s
				}
				o := op
				capacity := models[0].capacity()
				for _, m := range models[1:] {
					capacity = min(capacity, m.capacity())
				}
				o.Cost = rng.Int64N(capacity + 2) // 0 .. capacity+1
				if len(charges) > 0 && rng.IntN(5) == 0 {
					o = charges[rng.IntN(len(charges))]
					o.Refund = true
				}
				before := sts
				want, write := refOp(t, models, &o, now)
				got := o.Apply(&sts, now)
				cmp := got
				for j := range cmp.N {
					cmp.Quotas[j].TTLMS = 0
				}
				if cmp != want {
					t.Fatalf("step %d (%+v, now %d, states %+v):\n got %+v\nwant %+v", i, o, now, before, got, want)
				}
				for j := range got.N {
					ttl := got.Quotas[j].TTLMS
					if (ttl > 0) != write[j] {
						t.Fatalf("step %d quota %d: TTLMS %d, model says write=%v (%+v, states %+v)", i, j, ttl, write[j], o, before)
					}
					if !write[j] && sts[j] != before[j] {
						t.Fatalf("step %d quota %d: state changed %+v -> %+v without a write", i, j, before[j], sts[j])
					}
					if ttl > 0 && !o.Refund {
						if !models[j].whole(now+ttl) || ttl > models[j].ttlBound() {
							t.Fatalf("step %d quota %d: TTL %d: the state still matters then, or over the bound %d", i, j, ttl, models[j].ttlBound())
						}
					}
				}
				if got.Allowed && !o.Refund {
					for j := range o.N {
						o.Quotas[j].Window = got.Quotas[j].Window
					}
					o.Cost = rng.Int64N(o.Cost + 1) // refund all or part of it
					charges = append(charges, o)
				}
				switch {
				case o.Refund:
					counts[0]++
				case got.Allowed:
					counts[1]++
				default:
					counts[2]++
				}
			}
			t.Logf("%d refunds, %d admitted, %d denied", counts[0], counts[1], counts[2])
			if counts[0] < steps/20 || counts[1] < steps/10 || counts[2] < steps/10 {
				t.Errorf("sequence too one-sided: %v", counts)
			}
		})
	}
}

// greedy is a client that asks for cost at every instant it is told to
// (RetryAfter after a denial, the same instant after an admission), with
// the store's state in st. It returns the number of admissions in
// [from, to) and checks that no RetryAfter is early.
func greedy(t *testing.T, q Quota, st *State, cost, from, to int64, clock func(real int64) int64) (admitted int64) {
	t.Helper()
	op := Op{Cost: cost, N: 1, Quotas: [MaxQuotas]Quota{q}}
	for real := from; real < to; {
		sts := [MaxQuotas]State{*st}
		res := op.Apply(&sts, clock(real))
		*st = sts[0]
		if res.Allowed {
			admitted++
			continue
		}
		retry := res.Quotas[0].RetryAfterMS
		if retry <= 0 {
			t.Fatalf("denied at %d with RetryAfter %d", real, retry)
		}
		// Not a millisecond early: 1 ms before, still denied.
		if retry > 1 {
			probe := [MaxQuotas]State{*st}
			if r := op.Apply(&probe, clock(real+retry-1)); r.Allowed && clock(real+retry-1) == clock(real)+retry-1 {
				t.Fatalf("admitted 1 ms before RetryAfter %d (%+v at %d)", retry, *st, clock(real))
			}
		}
		real += retry
	}
	return admitted
}

// TestSteadyRateNoDrift: a client asking as fast as it is allowed, on a fake
// clock, over 1 000 windows: a token bucket admits exactly Burst + 1000*Limit
// and a fixed window exactly 1000*Limit, for rates whose emission interval
// is not a whole number of milliseconds (3/s, 7/min, 3 000/s); a sliding
// window never more than Limit in any window. RetryAfter is never early.
func TestSteadyRateNoDrift(t *testing.T) {
	const windows = 1000
	rates := []struct{ limit, w int64 }{{3, 1000}, {7, 60_000}, {3000, 1000}}
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow} {
		for _, r := range rates {
			t.Run(fmt.Sprintf("%v/%dp%dms", alg, r.limit, r.w), func(t *testing.T) {
				q := Quota{Algorithm: alg, Limit: r.limit, WindowMS: r.w, Burst: r.limit}
				if alg == TokenBucket {
					q.Burst = r.limit
				}
				start := int64(1_767_225_600_000) // aligned on every window here
				var st State
				id := func(x int64) int64 { return x }
				got := greedy(t, q, &st, 1, start, start+windows*r.w, id)
				switch alg {
				case TokenBucket:
					// The burst at start, then the k-th more at
					// start + k*W/Limit exactly, admitted at that instant
					// rounded up to the ms: k*W/Limit <= 1000*W - 1.
					if want := q.Burst + (windows*r.w-1)*r.limit/r.w; got != want {
						t.Errorf("admitted %d over %d windows, want exactly %d", got, windows, want)
					}
				case FixedWindow:
					if want := windows * r.limit; got != want {
						t.Errorf("admitted %d over %d windows, want exactly %d", got, windows, want)
					}
				default:
					if got > windows*r.limit || got < windows*r.limit/2 {
						t.Errorf("admitted %d over %d windows, want at most %d and no starvation", got, windows, windows*r.limit)
					}
				}
			})
		}
	}
}

// maxWait is a policy's own longest wait for cost without clock steps:
// FixedWindow one window; SlidingWindow up to the next window plus the time
// its count takes to decay by cost; TokenBucket the refill time of the
// bucket.
func maxWait(q Quota, cost int64) int64 {
	switch q.Algorithm {
	case FixedWindow:
		return q.WindowMS
	case TokenBucket:
		return (q.Burst*q.WindowMS + q.Limit - 1) / q.Limit
	}
	return q.WindowMS + (cost*q.WindowMS+q.Limit-1)/q.Limit
}

// TestClockStepBack: a client uses its whole quota, then the clock steps
// back (from 1 ms to 2 h): every RetryAfter it is given is at most the
// policy's own maximum plus 1 s, is exact (it is admitted then), and it is
// admitted within that bound of real time after the step.
func TestClockStepBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 1))
	steps := []int64{1, 500, 999, 1000, 1001, 1500, 60_000, 3_600_000, 7_200_000}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			for trial := range 3000 {
				limit := 1 + rng.Int64N(10)
				w := []int64{1000, 7000, 60_000}[rng.IntN(3)]
				q := Quota{Algorithm: alg, Limit: limit, WindowMS: w, PhaseMS: rng.Int64N(w)}
				if alg == TokenBucket {
					q.Burst, q.PhaseMS = 1+rng.Int64N(10), 0
				}
				cost := 1 + rng.Int64N(q.capacity())
				op := Op{Cost: cost, N: 1, Quotas: [MaxQuotas]Quota{q}}
				now := 1_767_225_600_000 + rng.Int64N(100_000)
				var st State
				for { // use the quota up
					sts := [MaxQuotas]State{st}
					if !op.Apply(&sts, now).Allowed {
						break
					}
					st = sts[0]
					now += rng.Int64N(3)
				}
				step := steps[rng.IntN(len(steps))]
				now -= step
				bound := maxWait(q, cost) + 1000
				waited := int64(0)
				for {
					sts := [MaxQuotas]State{st}
					res := op.Apply(&sts, now+waited)
					st = sts[0] // a normalized state is written even on a denial
					if res.Allowed {
						break
					}
					retry := res.Quotas[0].RetryAfterMS
					if retry <= 0 || retry > bound {
						t.Fatalf("trial %d (%+v cost %d, step back %d ms): RetryAfter %d ms, want 1..%d", trial, q, cost, step, retry, bound)
					}
					probe := [MaxQuotas]State{st}
					if op.Apply(&probe, now+waited+retry-1).Allowed {
						t.Fatalf("trial %d (%+v cost %d, step back %d): admitted before RetryAfter %d", trial, q, cost, step, retry)
					}
					waited += retry
				}
				if waited > bound {
					t.Fatalf("trial %d (%+v cost %d, step back %d ms): admitted after %d ms, want <= %d", trial, q, cost, step, waited, bound)
				}
			}
		})
	}
}

// TestClockStepForward: a greedy client over 20 windows of real time; the
// clock jumps forward once (from 1 ms to 2 h). It is admitted at most one
// capacity (Limit, or Burst) more than without the step. When the clock
// later steps back again, each of the two steps hands out at most one
// capacity early (a window algorithm's carried counts restart in a window
// of the earlier clock).
func TestClockStepForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2))
	jumps := []int64{1, 999, 1000, 1001, 30_000, 3_600_000, 7_200_000}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			for trial := range 400 {
				limit := 1 + rng.Int64N(10)
				w := []int64{1000, 7000}[rng.IntN(2)]
				q := Quota{Algorithm: alg, Limit: limit, WindowMS: w, PhaseMS: rng.Int64N(w)}
				if alg == TokenBucket {
					q.Burst, q.PhaseMS = 1+rng.Int64N(10), 0
				}
				start := 1_767_225_600_000 + rng.Int64N(100_000)
				end := start + 20*w
				var st State
				base := greedy(t, q, &st, 1, start, end, func(r int64) int64 { return r })
				jump := jumps[rng.IntN(len(jumps))]
				at := start + rng.Int64N(20*w)
				back := end + 1 // no step back
				if rng.IntN(2) == 0 {
					back = at + rng.Int64N(end-at)
				}
				clock := func(r int64) int64 {
					if r >= at && r < back {
						return r + jump
					}
					return r
				}
				st = State{}
				stepped := greedy(t, q, &st, 1, start, end, clock)
				bound := base + q.capacity()
				if back <= end {
					bound += q.capacity()
				}
				if stepped > bound {
					t.Fatalf("trial %d (%+v, jump %d at %d, back at %d): %d admitted, %d without the step: more than one capacity extra",
						trial, q, jump, at-start, back-start, stepped, base)
				}
			}
		})
	}
}

// TestRefundRules pins the refund rules on hand-made cases: a refund gives
// back at most what the charge's window still holds, never below zero,
// never touches a rolled window, never creates state; a token bucket is
// never refunded past full, nor by more than is left of the charge.
func TestRefundRules(t *testing.T) {
	const now = 1_000_000
	tests := []struct {
		name   string
		q      Quota
		st     State
		cost   int64
		want   State
		writes bool
	}{
		{"fixed_same_window", Quota{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000, Window: 1000}, State{Window: 1000, Count: 3}, 2, State{Window: 1000, Count: 1}, true},
		{"fixed_not_below_zero", Quota{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000, Window: 1000}, State{Window: 1000, Count: 1}, 4, State{Window: 1000}, true},
		{"fixed_rolled_window_left_alone", Quota{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000, Window: 999}, State{Window: 1000, Count: 3}, 1, State{Window: 1000, Count: 3}, false},
		{"sliding_previous_window", Quota{Algorithm: SlidingWindow, Limit: 5, WindowMS: 1000, Window: 999}, State{Window: 1000, Count: 3, Prev: 4}, 1, State{Window: 1000, Count: 3, Prev: 3}, true},
		{"sliding_expired_window_left_alone", Quota{Algorithm: SlidingWindow, Limit: 5, WindowMS: 1000, Window: 998}, State{Window: 1000, Count: 3, Prev: 4}, 1, State{Window: 1000, Count: 3, Prev: 4}, false},
		{"fresh_state_not_created", Quota{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000, Window: 1000}, State{}, 1, State{}, false},
		{"bucket_gives_tokens_back", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3, Window: now + 1000}, State{TAT: now + 1000}, 2, State{TAT: now + 333, TATFrac: 1}, true},
		{"bucket_never_past_full", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3, Window: now + 100}, State{TAT: now + 100}, 3, State{TAT: now}, true},
		// The charge's TAT (Window) is behind now: the bucket has refilled
		// past it, later requests' tokens stay taken.
		{"bucket_faded_charge_gives_nothing", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3, Window: now}, State{TAT: now + 1000}, 1, State{TAT: now + 1000}, false},
		// 100 ms of a 2-token charge (666 ms) are left: 100 ms given back.
		{"bucket_partly_faded_charge", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3, Window: now + 100}, State{TAT: now + 1000}, 2, State{TAT: now + 900}, true},
		{"bucket_full_untouched", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3}, State{TAT: now - 5}, 1, State{TAT: now - 5}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := Op{Refund: true, Cost: tc.cost, N: 1, Quotas: [MaxQuotas]Quota{tc.q}}
			sts := [MaxQuotas]State{tc.st}
			res := op.Apply(&sts, now)
			if sts[0] != tc.want || (res.Quotas[0].TTLMS > 0) != tc.writes || !res.Allowed {
				t.Errorf("state %+v -> %+v (TTL %d, allowed %v), want %+v (write %v)", tc.st, sts[0], res.Quotas[0].TTLMS, res.Allowed, tc.want, tc.writes)
			}
		})
	}
}

// TestSeveralQuotasAllOrNothing: a request one quota denies takes nothing
// from the others; Remaining then counts before the request.
func TestSeveralQuotasAllOrNothing(t *testing.T) {
	const now = 1_767_225_600_000
	op := Op{Cost: 1, N: 2, Quotas: [MaxQuotas]Quota{
		{Algorithm: FixedWindow, Limit: 10, WindowMS: 60_000},
		{Algorithm: SlidingWindow, Limit: 2, WindowMS: 1000},
	}}
	var sts [MaxQuotas]State
	for i := range 2 {
		if res := op.Apply(&sts, now); !res.Allowed || res.Quotas[0].Remaining != int64(9-i) {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	before := sts
	res := op.Apply(&sts, now)
	if res.Allowed || !res.Quotas[0].Allowed || res.Quotas[1].Allowed || sts != before {
		t.Fatalf("third call: %+v, states %+v -> %+v", res, before, sts)
	}
	if res.Quotas[0].Remaining != 8 || res.Quotas[0].RetryAfterMS != 0 || res.Quotas[1].RetryAfterMS <= 0 {
		t.Errorf("third call numbers: %+v", res)
	}
}

// Property over the boundary of the accepted TokenBucket range (Limit up to
// 2^50, Burst*Window up to 2^50, refill up to maxRefill): every number Apply
// returns is in range, every intermediate stays below 2^53 (so the Lua
// transcription is exact), and admission agrees with an arbitrary-precision
// computation of the bucket.
func TestTokenBucketBoundaryOfTheAcceptedRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 13))
	refillMS := maxRefill.Milliseconds()
	limits := []int64{1, 3, 7, 1000, 1 << 20, 1 << 40, 1 << 50}
	for trial := range 2000 {
		lim := limits[rng.IntN(len(limits))]
		w := 1 + rng.Int64N(maxWindow.Milliseconds())
		if rng.IntN(2) == 0 {
			w = []int64{1, 1000, 60_000, maxWindow.Milliseconds()}[rng.IntN(4)]
		}
		// The largest Burst both bounds accept, or a little under it.
		maxBurst := min(maxTokenBucketUnits/w, new(big.Int).Div(new(big.Int).Mul(big.NewInt(refillMS), big.NewInt(lim)), big.NewInt(w)).Int64())
		if maxBurst < 1 {
			continue
		}
		burst := max(maxBurst-rng.Int64N(3), 1)
		if checkTokenBucket(lim, w, burst) != nil {
			t.Fatalf("trial %d: Limit %d Window %d Burst %d (the bound itself) rejected: %v", trial, lim, w, burst, checkTokenBucket(lim, w, burst))
		}
		if checkTokenBucket(lim, w, maxBurst+1) == nil {
			t.Fatalf("trial %d: Limit %d Window %d Burst %d (past the bound) accepted", trial, lim, w, maxBurst+1)
		}
		q := Quota{Algorithm: TokenBucket, Limit: lim, WindowMS: w, Burst: burst}
		now := int64(1_767_225_600_000)
		var st State
		for range 50 {
			now += rng.Int64N(ceilDiv(burst*w, lim)+2) - rng.Int64N(ceilDiv(burst*w, lim)/4+2)
			cost := []int64{0, 1, burst, burst + 1, rng.Int64N(burst + 2)}[rng.IntN(5)]
			// The arbitrary-precision bucket: TAT - now in 1/Limit ms.
			off := new(big.Int).Add(new(big.Int).Mul(big.NewInt(st.TAT-now), big.NewInt(lim)), big.NewInt(st.TATFrac))
			tau := new(big.Int).Mul(big.NewInt(burst), big.NewInt(w))
			if off.Sign() < 0 || st.TAT < now {
				off.SetInt64(0)
			}
			if off.Cmp(tau) > 0 {
				off.Set(tau)
			}
			need := new(big.Int).Add(off, new(big.Int).Mul(big.NewInt(cost), big.NewInt(w)))
			if need.Cmp(big.NewInt(1<<53)) >= 0 || new(big.Int).Add(tau, big.NewInt(2*lim)).Cmp(big.NewInt(1<<53)) >= 0 {
				t.Fatalf("trial %d: an intermediate reaches 2^53 (Limit %d Window %d Burst %d cost %d)", trial, lim, w, burst, cost)
			}
			wantAllowed := cost <= burst && need.Cmp(tau) <= 0
			next, res := applyOne(&Op{Cost: cost, N: 1, Quotas: [MaxQuotas]Quota{q}}, st, now)
			if res.Allowed != wantAllowed {
				t.Fatalf("trial %d: Allowed %v, exact bucket says %v (Limit %d Window %d Burst %d cost %d state %+v now %d)",
					trial, res.Allowed, wantAllowed, lim, w, burst, cost, st, now)
			}
			for name, v := range map[string]int64{"ResetAfterMS": res.ResetAfterMS, "RetryAfterMS": res.RetryAfterMS, "TTLMS": res.TTLMS} {
				if v < 0 || v > refillMS {
					t.Fatalf("trial %d: %s %d out of [0, %d] (Limit %d Window %d Burst %d cost %d)", trial, name, v, refillMS, lim, w, burst, cost)
				}
			}
			if res.Remaining < 0 || res.Remaining > burst || next.TATFrac < 0 || next.TATFrac >= lim {
				t.Fatalf("trial %d: Remaining %d, state %+v (Burst %d)", trial, res.Remaining, next, burst)
			}
			st = next
		}
	}
}
