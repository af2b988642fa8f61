package limitstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/engine/internal/refmodel"
)

// refOp runs one Op through the models: the expected Result, and for each
// quota whether the store must write its state.
func refOp(tb testing.TB, ms []refmodel.Quota, op *Op, t int64) (Result, [MaxQuotas]bool) {
	res := Result{NowMS: t, N: len(ms)}
	var write [MaxQuotas]bool
	cost := op.Cost
	if op.Refund {
		res.Allowed = true
		for i, m := range ms {
			write[i] = m.Refund(t, cost, op.Quotas[i].Window)
			write[i] = m.Normalize(t) || write[i]
			res.Quotas[i] = QuotaResult{Allowed: true, Remaining: refmodel.Remaining(m, t), ResetAfterMS: m.ResetAfter(t), Window: m.Window(t)}
		}
		return res, write
	}
	all := true
	var waits [MaxQuotas]int64
	var oks, norms [MaxQuotas]bool
	for i, m := range ms {
		// The clock-step reading first: a reservation's wait counts from
		// the state as the store reads it.
		norms[i] = m.Normalize(t)
		waits[i], oks[i] = m.Wait(t, cost, op.WaitMS)
		all = all && oks[i]
	}
	res.Allowed = all
	for i, m := range ms {
		q := &res.Quotas[i]
		if all {
			q.Allowed, q.WaitMS, q.Window, write[i] = true, waits[i], m.Admit(t, cost), true
		} else {
			write[i] = norms[i]
			q.Allowed, q.Window = oks[i], m.Window(t)
			if c, ok := m.(*refmodel.Calendar); ok && !q.Allowed {
				q.RetryAfterMS = c.ResetAfter(t) // the named period does not move with t
			} else if !q.Allowed {
				q.RetryAfterMS = refmodel.RetryAfter(tb, m, t, cost)
			}
		}
		q.Remaining, q.ResetAfterMS = refmodel.Remaining(m, t), m.ResetAfter(t)
	}
	return res, write
}

// randomQuota returns a random quota (small numbers, so that the models'
// scans stay short) and its model.
func randomQuota(rng *rand.Rand, alg Algorithm, waiting bool) (Quota, refmodel.Quota) {
	limit := 1 + rng.Int64N(6)
	w := 1 + rng.Int64N(40)
	q := Quota{Algorithm: alg, Limit: limit, WindowMS: w}
	if alg == TokenBucket {
		q.Burst = 1 + rng.Int64N(6)
		if waiting {
			q.MaxWaitMS = rng.Int64N(4 * w)
			return q, refmodel.NewWaitingBucket(limit, q.Burst, w, q.MaxWaitMS)
		}
		return q, refmodel.NewBucket(limit, q.Burst, w)
	}
	q.PhaseMS = rng.Int64N(w)
	return q, refmodel.NewWindow(alg == SlidingWindow, limit, w, q.PhaseMS)
}

// TestApplyAgainstReferenceModels drives random sequences of Ops (1 to 4
// quotas of mixed algorithms, costs 0..capacity+1, refunds of earlier
// charges, clock steps forwards and backwards, small and large) through
// Op.Apply and the models, and compares every field of every Result, which
// states are written, and the time to live of each written state. Peeks
// (the models' answer from copies, nothing written) and resets (every
// state forgotten) are mixed in.
func TestApplyAgainstReferenceModels(t *testing.T) {
	const steps = 40_000
	for _, mix := range []string{"fixed-window", "sliding-window", "token-bucket", "mixed", "waiting-token-bucket", "waiting-mixed"} {
		t.Run(mix, func(t *testing.T) {
			t.Parallel()
			seed := uint64(len(mix)) * 7919
			rng := rand.New(rand.NewPCG(seed, 42))
			var (
				op      Op
				sts     [MaxQuotas]State
				models  []refmodel.Quota
				now     int64
				charges []Op // admitted Ops, to refund later
				counts  [4]int
				waited  int
			)
			reset := func() {
				op = Op{N: 1 + rng.IntN(MaxQuotas)}
				models = models[:0]
				for i := range op.N {
					alg := map[string]Algorithm{"fixed-window": FixedWindow, "sliding-window": SlidingWindow, "token-bucket": TokenBucket, "waiting-token-bucket": TokenBucket}[mix]
					if mix == "mixed" || mix == "waiting-mixed" {
						alg = Algorithm(rng.IntN(3))
					}
					var m refmodel.Quota
					op.Quotas[i], m = randomQuota(rng, alg, strings.HasPrefix(mix, "waiting"))
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
				capacity := models[0].Capacity()
				for _, m := range models[1:] {
					capacity = min(capacity, m.Capacity())
				}
				o.Cost = rng.Int64N(capacity + 2) // 0 .. capacity+1
				if strings.HasPrefix(mix, "waiting") {
					o.WaitMS = rng.Int64N(5 * w) // at, under and over the quotas' MaxWaitMS
				}
				if len(charges) > 0 && rng.IntN(5) == 0 {
					o = charges[rng.IntN(len(charges))]
					o.Refund = true
				}
				switch r := rng.IntN(100); {
				case r < 8 && !o.Refund:
					// A Peek: the answer of the same Op taken, from
					// copies of the models; nothing written, no state
					// changed.
					o.Peek = true
					views := make([]refmodel.Quota, len(models))
					for j, m := range models {
						views[j] = m.Clone()
					}
					want, _ := refOp(t, views, &o, now)
					before := sts
					got := o.Apply(&sts, now)
					for j := range got.N {
						if got.Quotas[j].TTLMS != 0 {
							t.Fatalf("step %d: Peek quota %d has TTLMS %d", i, j, got.Quotas[j].TTLMS)
						}
					}
					if got != want || sts != before {
						t.Fatalf("step %d: Peek (%+v, now %d, states %+v -> %+v):\n got %+v\nwant %+v", i, o, now, before, sts, got, want)
					}
					counts[3]++
					continue
				case r < 10:
					// A Reset: the store deletes every state.
					sts = [MaxQuotas]State{}
					for _, m := range models {
						m.Forget()
					}
					charges = charges[:0]
					continue
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
						if !models[j].Whole(now+ttl) || ttl > models[j].TTLBound() {
							t.Fatalf("step %d quota %d: TTL %d: the state still matters then, or over the bound %d", i, j, ttl, models[j].TTLBound())
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
					for j := range got.N {
						if got.Quotas[j].WaitMS > 0 {
							waited++
							break
						}
					}
				default:
					counts[2]++
				}
			}
			t.Logf("%d refunds, %d admitted (%d with a reserved slot), %d denied, %d peeks", counts[0], counts[1], waited, counts[2], counts[3])
			if strings.HasPrefix(mix, "waiting") && waited < steps/50 {
				t.Errorf("only %d admissions reserved a slot", waited)
			}
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
		// A charge of another epoch (taken before a Reset of the key)
		// gives nothing back, whatever its window; one of the state's own
		// epoch gives back as ever, the epoch kept.
		{"fixed_other_epoch_gives_nothing", Quota{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000, Window: 1000}, State{Window: 1000, Count: 3, Epoch: 1}, 2, State{Window: 1000, Count: 3, Epoch: 1}, false},
		{"fixed_same_epoch", Quota{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000, Window: 1000, Epoch: 2}, State{Window: 1000, Count: 3, Epoch: 2}, 2, State{Window: 1000, Count: 1, Epoch: 2}, true},
		{"sliding_other_epoch_gives_nothing", Quota{Algorithm: SlidingWindow, Limit: 5, WindowMS: 1000, Window: 999, Epoch: 1}, State{Window: 1000, Count: 3, Prev: 4}, 1, State{Window: 1000, Count: 3, Prev: 4}, false},
		{"bucket_other_epoch_gives_nothing", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3, Window: now + 1000}, State{TAT: now + 1000, Epoch: 3}, 2, State{TAT: now + 1000, Epoch: 3}, false},
		{"bucket_same_epoch", Quota{Algorithm: TokenBucket, Limit: 3, WindowMS: 1000, Burst: 3, Window: now + 1000, Epoch: 3}, State{TAT: now + 1000, Epoch: 3}, 2, State{TAT: now + 333, TATFrac: 1, Epoch: 3}, true},
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

// TestApplyKeepsTheEpoch: whatever Apply writes (an admission, a new
// window, a state the clock fell behind, a Peek's copy), each State keeps
// its Epoch, and each QuotaResult reports it.
func TestApplyKeepsTheEpoch(t *testing.T) {
	const now = 1_767_225_600_000
	tests := []struct {
		name string
		op   Op
		st   [MaxQuotas]State
	}{
		{"fixed_new_window", Op{Cost: 1, N: 1, Quotas: [MaxQuotas]Quota{{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000}}}, [MaxQuotas]State{{Window: 1, Count: 5, Epoch: 4}}},
		{"fixed_clock_fell_behind", Op{Cost: 9, N: 1, Quotas: [MaxQuotas]Quota{{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000}}}, [MaxQuotas]State{{Window: now/1000 + 100, Count: 2, Epoch: 4}}},
		{"sliding_denied", Op{Cost: 1, N: 1, Quotas: [MaxQuotas]Quota{{Algorithm: SlidingWindow, Limit: 1, WindowMS: 1000}}}, [MaxQuotas]State{{Window: now / 1000, Count: 1, Epoch: 4}}},
		{"bucket_clamped", Op{Cost: 1, N: 1, Quotas: [MaxQuotas]Quota{{Algorithm: TokenBucket, Limit: 1, WindowMS: 1000, Burst: 1}}}, [MaxQuotas]State{{TAT: now + 1e7, Epoch: 4}}},
		{"two_quotas_peek", Op{Peek: true, Cost: 1, N: 2, Quotas: [MaxQuotas]Quota{{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000}, {Algorithm: TokenBucket, Limit: 2, WindowMS: 1000, Burst: 2}}}, [MaxQuotas]State{{Epoch: 4}, {TAT: now, Epoch: 7}}},
		{"two_quotas_admitted", Op{Cost: 1, N: 2, Quotas: [MaxQuotas]Quota{{Algorithm: FixedWindow, Limit: 5, WindowMS: 1000}, {Algorithm: TokenBucket, Limit: 2, WindowMS: 1000, Burst: 2}}}, [MaxQuotas]State{{Epoch: 4}, {TAT: now, Epoch: 7}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sts := tc.st
			res := tc.op.Apply(&sts, now)
			for i := range tc.op.N {
				if sts[i].Epoch != tc.st[i].Epoch || res.Quotas[i].Epoch != tc.st[i].Epoch {
					t.Errorf("quota %d: state %+v -> %+v, result epoch %d; want epoch %d kept and reported", i, tc.st[i], sts[i], res.Quotas[i].Epoch, tc.st[i].Epoch)
				}
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

// BenchmarkApply measures Op.Apply alone on an existing state, admitted
// (a quota far from exhaustion: 2^30 per 2^20 ms, the clock one ms further
// at each call, so no run exhausts it), for one quota and for two.
func BenchmarkApply(b *testing.B) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		q := Quota{Algorithm: alg, Limit: 1 << 30, WindowMS: 1 << 20, PhaseMS: 7}
		if alg == TokenBucket {
			q.Burst, q.PhaseMS = q.Limit, 0
		}
		for _, n := range []int{1, 2} {
			b.Run(alg.String()+"/n="+string(rune('0'+n)), func(b *testing.B) {
				op := Op{Cost: 1, N: n, Quotas: [MaxQuotas]Quota{q, q}}
				var sts [MaxQuotas]State
				now := int64(1_767_225_600_000)
				b.ReportAllocs()
				for b.Loop() {
					now++
					if res := op.Apply(&sts, now); !res.Allowed {
						b.Fatal("limited")
					}
				}
			})
		}
	}
}

// A reservation's cancellation is a Refund with its Window: before its slot
// it gives back exactly its cost (the next request reserves the freed
// slot); once its slot has begun, only what the bucket has not refilled
// past, never time a later request uses; and nothing while a later
// reservation is still ahead (its slot would be given out twice).
func TestReservationCancel(t *testing.T) {
	q := Quota{Algorithm: TokenBucket, Limit: 50, WindowMS: 1000, Burst: 1, MaxWaitMS: 1000}
	op := Op{Cost: 1, N: 1, WaitMS: 1000, Quotas: [MaxQuotas]Quota{q}}
	var sts [MaxQuotas]State
	take := func(now, wantWait int64) QuotaResult {
		t.Helper()
		res := op.Apply(&sts, now)
		if !res.Allowed || res.Quotas[0].WaitMS != wantWait {
			t.Fatalf("take at %d: %+v, want admitted with a wait of %d ms", now, res, wantWait)
		}
		return res.Quotas[0]
	}
	cancel := func(r QuotaResult, now int64) {
		c := op
		c.Refund, c.WaitMS = true, 0
		c.Quotas[0].Window = r.Window
		c.Apply(&sts, now)
	}
	take(0, 0)       // the burst: TAT 20
	a := take(0, 20) // slot 20
	b := take(0, 40) // slot 40
	cancel(b, 10)    // the last one, before its slot
	take(10, 30)     // gets slot 40 again
	if sts[0].TAT != 60 || sts[0].TATFrac != 0 {
		t.Fatalf("TAT %d+%d/50, want 60: three slots after the burst's", sts[0].TAT, sts[0].TATFrac)
	}
	c := take(10, 50) // slot 60
	cancel(a, 15)     // before its slot, but c's is still ahead: nothing comes back
	if sts[0].TAT != 80 {
		t.Fatalf("TAT %d, want 80: the reservation at 60 keeps its slot (a TAT of 60 would give it out again)", sts[0].TAT)
	}
	cancel(c, 15) // the latest, before its slot: all of it
	if sts[0].TAT != 60 {
		t.Fatalf("TAT %d, want 60: the latest reservation given back whole", sts[0].TAT)
	}
	d := take(15, 45) // gets slot 60 again
	cancel(d, 70)     // its slot (60..80) half over, none ahead: the 10 ms left come back
	if sts[0].TAT != 70 {
		t.Fatalf("TAT %d, want 70: only the 10 ms of the slot not yet refilled", sts[0].TAT)
	}
	cancel(d, 85) // its slot is over: nothing comes back
	if sts[0].TAT != 70 {
		t.Fatalf("a cancellation after its slot moved the TAT to %d", sts[0].TAT)
	}
}
