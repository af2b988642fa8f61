package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// resetter returns the store under test as a limitstore.Resetter, or skips
// t loudly: Peek and Reset need one.
func resetter(t *testing.T, s limitstore.Store) limitstore.Resetter {
	t.Helper()
	r, ok := s.(limitstore.Resetter)
	if !ok {
		t.Skipf("!!! SKIPPED: the store (%T) does not implement limitstore.Resetter, so Limiter.Peek and Reset cannot run on it", s)
	}
	return r
}

// peekResetDifferential is differential with Peeks and Resets mixed in:
// random Takes, refunds, Peeks (the Result the Op would get, nothing
// written: a Take right after must see the same states) and Resets of one
// identity's keys (every quota forgotten at once), compared field by field
// with the model.
func peekResetDifferential(t *testing.T, alg limit.Algorithm, newStore NewStoreFunc) {
	clock := newStepClock()
	store := newStore(t, clock.Now)
	rs := resetter(t, store)
	ref := &model{m: map[string]modelEntry{}}
	rng := rand.New(rand.NewPCG(uint64(alg), 29))
	const keys = 4
	var ops [keys]limitstore.Op
	for i := range ops {
		ops[i] = limitstore.Op{N: 1 + i%3}
		for j := range ops[i].N {
			ops[i].Quotas[j] = randomQuota(rng, alg, fmt.Sprintf("conformance:{p%d}:b%d:%c:r:id", i, j, "fsg"[alg]))
		}
	}
	ctx := context.Background()
	var charges []limitstore.Op
	var peeks, resets int
	for step := 0; step < 1500; step++ {
		randomStep(rng, clock, 600*time.Millisecond)
		k := rng.IntN(keys)
		op := ops[k]
		op.Cost = 1 + rng.Int64N(2)
		now := clock.Now().UnixMilli()
		switch r := rng.IntN(10); {
		case r == 0:
			var ks [][]byte
			for j := range op.N {
				ks = append(ks, op.Quotas[j].Key)
			}
			ref.reset(ks, now)
			if err := rs.Reset(ctx, ks); err != nil {
				t.Fatalf("step %d: Reset: %v", step, err)
			}
			resets++
			continue
		case r <= 2:
			op.Peek = true
			peeks++
		case len(charges) > 0 && r == 3:
			op = charges[rng.IntN(len(charges))]
			op.Refund = true
		}
		want := ref.take(&op, now)
		got, err := limittest.Take(ctx, store, &op)
		if err != nil {
			t.Fatalf("step %d: Take: %v", step, err)
		}
		for j := range limitstore.MaxQuotas {
			if op.Peek && got.Quotas[j].TTLMS != 0 {
				t.Fatalf("step %d: a Peek answered TTLMS %d", step, got.Quotas[j].TTLMS)
			}
			got.Quotas[j].TTLMS, want.Quotas[j].TTLMS = 0, 0
		}
		if got != want {
			t.Fatalf("step %d (%+v at %d):\n got %+v\nwant %+v", step, op, now, got, want)
		}
		if got.Allowed && !op.Refund && !op.Peek {
			for j := range op.N {
				op.Quotas[j].Window, op.Quotas[j].Epoch = got.Quotas[j].Window, got.Quotas[j].Epoch
			}
			charges = append(charges, op)
		}
	}
	t.Logf("%d peeks, %d resets", peeks, resets)
}

// peekResetPolicies drives Limiters of several quotas and plans
// (multiPolicy) through ConsumeN, Peek and Reset on the store and, at the
// same instants, on the reference store: every Decision identical, field by
// field, every Reset forgetting every plan of the identity.
func peekResetPolicies(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := newStepClock()
			p := multiPolicy(alg)
			p.Name = "admin-" + alg.String()
			opts := []limit.Option{limit.WithKeyPrefix("conformance")}
			s := newStore(t, clock.Now)
			resetter(t, s)
			got, err := limit.New(s, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			want, err := limit.New(limittest.NewStore(clock.Now), p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(alg), 31))
			ids := []string{"a", "b", "pro-a", "pro-b"}
			for step := 0; step < 1200; step++ {
				randomStep(rng, clock, 900*time.Millisecond)
				id := ids[rng.IntN(len(ids))]
				var dg, dw limit.Decision
				var eg, ew error
				switch r := rng.IntN(10); {
				case r == 0:
					eg, ew = got.Reset(ctx, id), want.Reset(ctx, id)
				case r <= 3:
					dg, eg = got.Peek(ctx, id)
					dw, ew = want.Peek(ctx, id)
				default:
					dg, eg = got.ConsumeN(ctx, id, 1+rng.Int64N(2))
					dw, ew = want.ConsumeN(ctx, id, dg.Cost)
				}
				if eg != nil || ew != nil {
					t.Fatalf("step %d: %v / reference %v", step, eg, ew)
				}
				if !sameDecision(dg, dw) || dg.Identity() != dw.Identity() {
					t.Fatalf("step %d, %s at %v:\n got %+v\nwant %+v", step, id, clock.Now().UnixMilli(), dg, dw)
				}
			}
		})
	}
}

// resetRacesRequests: a Reset racing 200 concurrent requests of one
// identity leaves its count at exactly the requests admitted after it. Each
// request's Remaining says where it counted: the k admitted before the
// Reset saw counts 51..50+k (after the 50 requests in flight, below), the
// C after it 1..C, so the counts seen must be exactly {51..50+k} and
// {1..C} with k + C = 200 and C the count left, and C
// at least the requests that began after the Reset returned. Requests in
// flight across the Reset (charged before the round, held by their
// handlers) are given back (Policy.CountStatus) once it has returned,
// racing the requests after it: they give nothing back to the new count.
func resetRacesRequests(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	clock := limittest.NewClock(epoch)
	s := newStore(t, clock.Now)
	resetter(t, s)
	const limitN, n, inFlight = 1000, 200, 50
	l, err := limit.New(s, limit.Policy{Name: "reset-race", Algorithm: limit.FixedWindow, Limit: limitN, Window: time.Hour, AlignWindows: true,
		CountStatus: func(status int) bool { return status >= 400 }},
		limit.WithKeyPrefix("conformance"))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var wg sync.WaitGroup
		var after atomic.Int64
		var done atomic.Bool
		counts := make([]int64, n)
		start := make(chan struct{})
		reset := make(chan struct{})
		held := make([]limit.Decision, inFlight)
		for i := range held {
			if held[i], err = l.Consume(ctx, "racer"); err != nil || !held[i].Allowed {
				t.Fatalf("a request in flight: %+v, %v", held[i], err)
			}
		}
		for i := range held {
			wg.Go(func() {
				<-reset
				l.Finish(ctx, &held[i], 200) // not counted: given back
			})
		}
		for i := range n + 1 {
			wg.Go(func() {
				<-start
				if i == 40+60*round {
					if err := l.Reset(ctx, "racer"); err != nil {
						t.Error(err)
					}
					done.Store(true)
					close(reset)
					return
				}
				began := done.Load()
				d, err := l.Consume(ctx, "racer")
				if err != nil || !d.Allowed {
					t.Errorf("request: %+v, %v", d, err)
				}
				if i > 40+60*round {
					i--
				}
				counts[i] = limitN - d.Remaining
				if began {
					after.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		d, err := l.Peek(ctx, "racer")
		if err != nil {
			t.Fatal(err)
		}
		c := limitN - d.Remaining - 1 // Peek's Remaining is after its own request
		want := make([]int64, 0, n)
		for v := int64(1); v <= c; v++ {
			want = append(want, v)
		}
		for v := int64(1); v <= n-c; v++ {
			want = append(want, inFlight+v) // after the requests in flight
		}
		slices.Sort(want)
		slices.Sort(counts)
		if !slices.Equal(counts, want) || c < after.Load() {
			t.Fatalf("round %d: %d counted after the Reset (%d began after it returned), counts seen %v", round, c, after.Load(), counts)
		}
		t.Logf("round %d: %d of %d counted after the Reset, %d of them began after it returned", round, c, n, after.Load())
		if err := l.Reset(ctx, "racer"); err != nil {
			t.Fatal(err)
		}
	}
}
