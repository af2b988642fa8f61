package limit

import (
	"math/rand/v2"
	"testing"
)

// The reference models below recompute every decision from the full history
// of admitted requests, by brute force, and find Retry-After and Reset by
// scanning forward one millisecond at a time. They share no code with
// Op.Apply, so an agreement over 100 000 random steps is evidence, not
// tautology.

type admitted struct{ at, cost int64 }

// refWindow models FixedWindow and SlidingWindow from the admitted history.
type refWindow struct {
	sliding         bool
	limit, w, phase int64
	hist            []admitted
}

func (m *refWindow) idx(t int64) int64 { return floorDivRef(t-m.phase, m.w) }

func floorDivRef(a, b int64) int64 {
	if a >= 0 {
		return a / b
	}
	return -((-a + b - 1) / b)
}

func (m *refWindow) sum(idx int64) int64 {
	var n int64
	for _, h := range m.hist {
		if m.idx(h.at) == idx {
			n += h.cost
		}
	}
	return n
}

// fits reports whether cost fits at time t; in exact rational terms for the
// sliding window: prev*(w-e)/w + curr + cost <= limit.
func (m *refWindow) fits(t, cost int64) bool {
	i := m.idx(t)
	curr := m.sum(i)
	if !m.sliding {
		return curr+cost <= m.limit
	}
	prev := m.sum(i - 1)
	e := t - (i*m.w + m.phase)
	return prev*(m.w-e)+(curr+cost)*m.w <= m.limit*m.w
}

func (m *refWindow) remaining(t int64) int64 {
	var n int64
	for m.fits(t, n+1) {
		n++
	}
	return n
}

func (m *refWindow) take(t, cost int64) Result {
	res := Result{NowMS: t}
	if m.fits(t, cost) {
		m.hist = append(m.hist, admitted{t, cost})
		res.Allowed = true
	} else {
		// scan forward for the first instant the same request fits
		for dt := int64(1); ; dt++ {
			if m.fits(t+dt, cost) {
				res.RetryAfterMS = dt
				break
			}
			if dt > 3*m.w { // never admissible (cost > limit)
				res.RetryAfterMS = -1
				break
			}
		}
	}
	res.Remaining = m.remaining(t)
	// Reset: fixed window end; sliding, when the estimate is back to zero.
	i := m.idx(t)
	end := (i+1)*m.w + m.phase
	if !m.sliding {
		res.ResetAfterMS = end - t
	} else {
		switch {
		case m.sum(i) > 0:
			res.ResetAfterMS = end + m.w - t
		case m.sum(i-1) > 0:
			res.ResetAfterMS = end - t
		}
	}
	// forget history older than two windows
	keep := m.hist[:0]
	for _, h := range m.hist {
		if m.idx(h.at) >= i-1 {
			keep = append(keep, h)
		}
	}
	m.hist = keep
	return res
}

// refBucket models a token bucket with tokens scaled by the window: capacity
// burst*w, refilling limit units per ms, a request of cost n needs n*w units.
type refBucket struct {
	limit, burst, w int64
	level, last     int64
	started         bool
}

func (m *refBucket) levelAt(t int64) int64 {
	if !m.started {
		return m.burst * m.w
	}
	if t < m.last {
		t = m.last
	}
	return min(m.burst*m.w, m.level+(t-m.last)*m.limit)
}

func (m *refBucket) take(t, cost int64) Result {
	res := Result{NowMS: t}
	lv := m.levelAt(t)
	if lv >= cost*m.w {
		m.level, m.last, m.started = lv-cost*m.w, max(t, m.last), true
		lv = m.level
		res.Allowed = true
	} else {
		for dt := int64(1); ; dt++ {
			if m.levelAt(t+dt) >= cost*m.w {
				res.RetryAfterMS = dt
				break
			}
			if dt > 4*m.w*m.burst {
				res.RetryAfterMS = -1
				break
			}
		}
	}
	res.Remaining = lv / m.w
	for dt := int64(0); ; dt++ {
		if m.levelAt(t+dt) == m.burst*m.w {
			res.ResetAfterMS = dt
			break
		}
	}
	return res
}

func TestAlgorithmsAgainstReferenceModels(t *testing.T) {
	const steps = 100_000
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(alg)+1, 42))
			var (
				op    Op
				st    State
				now   int64
				win   *refWindow
				bkt   *refBucket
				reset = func() {
					limit := 1 + rng.Int64N(6)
					w := limit * (1 + rng.Int64N(40)) // a multiple of limit for GCRA
					op = Op{Algorithm: alg, Limit: limit, WindowMS: w, PhaseMS: rng.Int64N(w)}
					if alg == TokenBucket {
						op.Burst = 1 + rng.Int64N(6)
						op.IntervalMS = w / limit
						op.PhaseMS = 0
						bkt = &refBucket{limit: limit, burst: op.Burst, w: w}
					} else {
						win = &refWindow{sliding: alg == SlidingWindow, limit: limit, w: w, phase: op.PhaseMS}
					}
					st = State{}
					now = rng.Int64N(1_000_000)
				}
			)
			reset()
			for i := 0; i < steps; i++ {
				if i%500 == 0 {
					reset()
				}
				// advance: often 0, sometimes to an exact window boundary,
				// sometimes a random amount up to two windows
				switch rng.IntN(5) {
				case 0:
				case 1:
					idx := floorDivRef(now-op.PhaseMS, op.WindowMS)
					now = (idx+1)*op.WindowMS + op.PhaseMS
				case 2:
					now += 1 + rng.Int64N(3)
				default:
					now += rng.Int64N(2 * op.WindowMS)
				}
				capacity := op.Limit
				if alg == TokenBucket {
					capacity = op.Burst
				}
				op.Cost = rng.Int64N(capacity + 2) // 0 .. capacity+1
				var got State
				var res Result
				got, res = op.Apply(st, now)
				var want Result
				if alg == TokenBucket {
					want = bkt.take(now, op.Cost)
				} else {
					want = win.take(now, op.Cost)
				}
				if !res.Allowed && got != st {
					t.Fatalf("step %d: denied request changed the state %+v -> %+v", i, st, got)
				}
				cmp := res
				cmp.TTLMS = 0
				if want.RetryAfterMS == -1 { // never admissible: any positive delay
					if cmp.RetryAfterMS <= 0 {
						t.Fatalf("step %d: cost above capacity got RetryAfter %d", i, cmp.RetryAfterMS)
					}
					want.RetryAfterMS = cmp.RetryAfterMS
				}
				if cmp != want {
					t.Fatalf("step %d (%+v, now %d, state %+v):\n got %+v\nwant %+v", i, op, now, st, cmp, want)
				}
				if res.Allowed && res.TTLMS <= 0 {
					t.Fatalf("step %d: allowed with TTL %d", i, res.TTLMS)
				}
				st = got
			}
		})
	}
}

// After the clock steps backwards, a denied request's RetryAfter still counts
// from the real now: with no further traffic the same request is admitted at
// exactly now+RetryAfter and not one millisecond earlier, in every algorithm.
func TestRetryAfterIsExactAfterTheClockStepsBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			for trial := 0; trial < 2000; trial++ {
				limit := 1 + rng.Int64N(5)
				w := limit * (1 + rng.Int64N(50))
				op := Op{Algorithm: alg, Limit: limit, WindowMS: w, PhaseMS: rng.Int64N(w), Burst: limit, IntervalMS: w / limit, Cost: 1}
				if alg == TokenBucket {
					op.PhaseMS = 0
				}
				now := 1_000_000 + rng.Int64N(10_000)
				var st State
				for { // fill until denied
					next, res := op.Apply(st, now)
					if !res.Allowed {
						break
					}
					st = next
					now += rng.Int64N(2)
				}
				now -= 1 + rng.Int64N(3*w) // the clock steps back
				_, res := op.Apply(st, now)
				if res.Allowed {
					continue // stepped back far enough to be admitted: nothing to check
				}
				if res.RetryAfterMS <= 0 || res.ResetAfterMS < 0 {
					t.Fatalf("trial %d: delays %+v", trial, res)
				}
				if _, r := op.Apply(st, now+res.RetryAfterMS-1); r.Allowed {
					t.Fatalf("trial %d: admitted 1 ms before RetryAfter %d (%+v, state %+v, now %d)", trial, res.RetryAfterMS, op, st, now)
				}
				if _, r := op.Apply(st, now+res.RetryAfterMS); !r.Allowed {
					t.Fatalf("trial %d: denied at RetryAfter %d (%+v, state %+v, now %d)", trial, res.RetryAfterMS, op, st, now)
				}
			}
		})
	}
}
