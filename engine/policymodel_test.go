package limit

import (
	"context"
	"fmt"
	"github.com/quotagate/quotagate/engine/internal/refmodel"
	"github.com/quotagate/quotagate/engine/limitstore"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// mapStore is the simplest store: Op.Apply over a map, at a settable clock.
type mapStore struct {
	mu  sync.Mutex
	now int64
	m   map[string]limitstore.State
}

func (s *mapStore) Describe() limitstore.Info { return limitstore.Info{Name: "map"} }

func (s *mapStore) Take(_ context.Context, op *limitstore.Op) (limitstore.Result, error) {
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
	seen := map[Rate]bool{}
	for n := 1 + rng.IntN(limitstore.MaxQuotas); len(rs) < n; {
		r := Rate{Limit: 1 + rng.Int64N(6), Window: time.Duration(1+rng.Int64N(40)) * time.Millisecond}
		if alg == TokenBucket {
			r.Burst = 1 + rng.Int64N(6)
		}
		if !seen[r] {
			seen[r] = true
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
