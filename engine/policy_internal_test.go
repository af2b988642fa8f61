package limit

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/internal/refmodel"
	"github.com/quotagate/quotagate/engine/limitstore"
)

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
		q := limitstore.Quota{Algorithm: TokenBucket, Limit: lim, WindowMS: w, Burst: burst}
		now := int64(1_767_225_600_000)
		var st limitstore.State
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
			next, res := applyOne(&limitstore.Op{Cost: cost, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}, st, now)
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

// mapStore is the simplest store: Op.Apply over a map, at a settable clock.
type mapStore struct {
	mu  sync.Mutex
	now int64
	m   map[string]limitstore.State
}

func (s *mapStore) Describe() limitstore.Info { return limitstore.Info{Name: "map"} }

func (s *mapStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *mapStore) take(_ context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sts [limitstore.MaxQuotas]limitstore.State
	for i := range op.N {
		sts[i] = s.m[string(op.Quotas[i].Key)]
	}
	res := op.Apply(&sts, s.now)
	for i := range op.N {
		if res.Allowed || res.Quotas[i].TTLMS > 0 {
			s.m[string(op.Quotas[i].Key)] = sts[i]
		}
	}
	return res, nil
}

// randomRates returns 1 to MaxQuotas distinct quotas of algorithm alg in
// whole ms, small enough for the brute-force models.
func randomRates(rng *rand.Rand, alg Algorithm) []Rate {
	var rs []Rate
	seen := map[time.Duration]bool{} // one window, one record
	for n := 1 + rng.IntN(limitstore.MaxQuotas); len(rs) < n; {
		r := Rate{Limit: 1 + rng.Int64N(6), Window: time.Duration(1+rng.Int64N(40)) * time.Millisecond}
		if alg == TokenBucket {
			r.Burst = 1 + rng.Int64N(6)
		}
		if !seen[r.Window] {
			seen[r.Window] = true
			rs = append(rs, r)
		}
	}
	return rs
}

func modelsOf(alg Algorithm, rs []Rate) []refmodel.Quota {
	ms := make([]refmodel.Quota, len(rs))
	for i, r := range rs {
		w := r.Window.Milliseconds()
		if alg == TokenBucket {
			ms[i] = refmodel.NewBucket(r.Limit, r.Burst, w)
		} else {
			ms[i] = refmodel.NewWindow(alg == SlidingWindow, r.Limit, w, 0)
		}
	}
	return ms
}

// TestPolicyDecisionsAgainstReferenceModels drives random sequences of
// ConsumeN calls through a Limiter whose policy has several quotas and a
// plan ("pro-" identities), and compares every Decision with what the
// brute-force models of algorithm_test.go say the whole policy must
// answer: all or nothing, a limited call taking nothing; Remaining,
// ResetAfter and Limit of the quota closest to exhaustion (least Remaining,
// then the later reset); RetryAfter the latest of the limiting quotas'; a
// cost above a capacity answered as OverCapacity without the store; the
// plan that decided.
func TestPolicyDecisionsAgainstReferenceModels(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+1, 15))
			for round := range 40 {
				def, pro := randomRates(rng, alg), randomRates(rng, alg)
				store := &mapStore{now: 1_767_225_600_000, m: map[string]limitstore.State{}}
				l, err := New(store, Policy{Name: fmt.Sprintf("m%d", round), Algorithm: alg, AlignWindows: true, Quotas: def,
					Plans: map[string][]Rate{"pro": pro},
					Plan: func(r Request) (string, error) {
						if id, _ := r.Native.(string); strings.HasPrefix(id, "pro-") {
							return "pro", nil
						}
						return "", nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				rates := map[string][]Rate{"a": def, "b": def, "pro-a": pro}
				models := map[string][]refmodel.Quota{"a": modelsOf(alg, def), "b": modelsOf(alg, def), "pro-a": modelsOf(alg, pro)}
				for step := range 300 {
					store.now += rng.Int64N(30)
					id := []string{"a", "b", "pro-a"}[rng.IntN(3)]
					ms, rs := models[id], rates[id]
					capacity := ms[0].Capacity()
					for _, m := range ms[1:] {
						capacity = min(capacity, m.Capacity())
					}
					cost := 1 + rng.Int64N(capacity+1)
					d, err := l.ConsumeN(context.Background(), id, cost)
					if err != nil {
						t.Fatal(err)
					}
					now := store.now
					want := Decision{Cost: cost, Plan: map[bool]string{true: "pro"}[strings.HasPrefix(id, "pro-")]}
					// the quota closest to exhaustion reports its numbers
					pick := func() {
						best := -1
						var bestRem, bestReset int64
						for i, m := range ms {
							rem, reset := refmodel.Remaining(m, now), m.ResetAfter(now)
							if best < 0 || rem < bestRem || rem == bestRem && reset > bestReset {
								best, bestRem, bestReset = i, rem, reset
							}
						}
						want.Limit, want.Remaining, want.ResetAfter = rs[best].Limit, bestRem, time.Duration(bestReset)*time.Millisecond
					}
					over := -1
					for i, m := range ms {
						if cost > m.Capacity() && over < 0 {
							over = i
						}
					}
					all := true
					for _, m := range ms {
						all = all && m.Fits(now, cost)
					}
					switch {
					case over >= 0:
						want.OverCapacity, want.Limit = true, rs[over].Limit
					case all:
						want.Allowed = true
						for _, m := range ms {
							m.Admit(now, cost)
						}
						pick()
					default:
						for _, m := range ms {
							m.Normalize(now)
							if !m.Fits(now, cost) {
								want.RetryAfter = max(want.RetryAfter, time.Duration(refmodel.RetryAfter(t, m, now, cost))*time.Millisecond)
							}
						}
						pick()
					}
					got := Decision{Allowed: d.Allowed, Cost: d.Cost, Plan: d.Plan, Limit: d.Limit, Remaining: d.Remaining,
						ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, OverCapacity: d.OverCapacity}
					if got != want {
						t.Fatalf("round %d step %d: %s cost %d, quotas %v (pro %v) at %d:\n got %+v\nwant %+v", round, step, id, cost, def, pro, now, got, want)
					}
				}
			}
		})
	}
}
