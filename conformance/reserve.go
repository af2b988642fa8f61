package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// reserveDifferential drives random sequences of token-bucket Ops that may
// reserve a slot (Quota.MaxWaitMS, Op.WaitMS), cancellations of earlier
// reservations (Refunds with the reservation's Window) and forward clock
// steps through the store and the model (backward steps: Op.Apply's own
// tests against the reference models), comparing every field of every
// Result (the reserved slot's WaitMS included).
func reserveDifferential(t *testing.T, newStore NewStoreFunc) {
	clock := newStepClock()
	store := newStore(t, clock.Now)
	ref := &model{m: map[string]modelEntry{}}
	rng := rand.New(rand.NewPCG(11, 7))
	const keys = 4
	var ops [keys]limitstore.Op
	for i := range ops {
		ops[i] = limitstore.Op{N: 1 + i%2}
		for j := range ops[i].N {
			q := randomQuota(rng, limit.TokenBucket, fmt.Sprintf("conformance:{w%d}:b%d:g:r:id", i, j))
			q.MaxWaitMS = rng.Int64N(3 * q.WindowMS)
			ops[i].Quotas[j] = q
		}
	}
	var charges []limitstore.Op
	reserved := 0
	for step := 0; step < 2000; step++ {
		randomStep(rng, clock, 400*time.Millisecond)
		op := ops[rng.IntN(keys)]
		capacity := int64(1 << 62)
		for j := range op.N {
			capacity = min(capacity, op.Quotas[j].Burst)
		}
		op.Cost = rng.Int64N(capacity + 2)
		op.WaitMS = rng.Int64N(4 * op.Quotas[0].WindowMS)
		if len(charges) > 0 && rng.IntN(4) == 0 {
			op = charges[rng.IntN(len(charges))]
			op.Refund = true
		}
		now := clock.Now().UnixMilli()
		want := ref.take(&op, now)
		got, err := limittest.Take(context.Background(), store, &op)
		if err != nil {
			t.Fatalf("step %d: Take: %v", step, err)
		}
		for j := range limitstore.MaxQuotas {
			got.Quotas[j].TTLMS, want.Quotas[j].TTLMS = 0, 0
		}
		if got != want {
			t.Fatalf("step %d (%+v at %d):\n got %+v\nwant %+v", step, op, now, got, want)
		}
		if got.Allowed && !op.Refund {
			for j := range op.N {
				op.Quotas[j].Window = got.Quotas[j].Window
				if got.Quotas[j].WaitMS > 0 {
					reserved++
				}
			}
			op.WaitMS = 0
			charges = append(charges, op)
		}
	}
	if reserved < 100 {
		t.Errorf("only %d reserved slots in 2000 steps: the sequence does not test reservations", reserved)
	}
}

// reserveCancelExact reserves 200 slots of one token bucket (50 per second,
// burst 1, MaxWait 10 s) at one instant and, halfway through the waits,
// first gives back reservations that are not the latest (chosen at
// random): nothing comes back, the state is unchanged (their slots pass
// unused; moving the TAT back would give the latest one's slot out
// twice). Then it cancels 100 as a Limiter's waiting line does, each time
// giving back the latest reservation still held, and checks that the
// store's state then equals that of a model that only ever saw the 100
// remaining reservations: every cancellation gave back exactly its cost,
// and the bucket keeps accounting for each reservation still waiting.
func reserveCancelExact(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	q := limitstore.Quota{Key: []byte("conformance:{c}:feed:50p1gb1w10000:r:id"), Algorithm: limit.TokenBucket, Limit: 50, WindowMS: 1000, Burst: 1, MaxWaitMS: 10_000}
	op := oneQuota(string(q.Key), q)
	op.WaitMS = q.MaxWaitMS
	const n = 200
	res := make([]limitstore.Result, n)
	for i := range res {
		r, err := limittest.Take(context.Background(), store, &op)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			t.Fatalf("reservation %d refused: %+v", i, r)
		}
		if want := int64(i) * 20; r.Quotas[0].WaitMS != want {
			t.Fatalf("reservation %d: slot in %d ms, want %d (one emission interval, 20 ms, after the one before)", i, r.Quotas[0].WaitMS, want)
		}
		res[i] = r
	}
	clock.Advance(time.Second) // halfway: slots 0..50 have begun
	giveBack := func(i int) {
		t.Helper()
		c := op
		c.Refund, c.WaitMS = true, 0
		c.Quotas[0].Window = res[i].Quotas[0].Window
		if _, err := limittest.Take(context.Background(), store, &c); err != nil {
			t.Fatal(err)
		}
	}
	probe := op
	probe.Cost, probe.WaitMS = 1, 0
	ask := func() limitstore.Result {
		t.Helper()
		got, err := limittest.Take(context.Background(), store, &probe)
		if err != nil {
			t.Fatal(err)
		}
		got.Quotas[0].TTLMS = 0
		return got
	}
	before := ask()
	rng := rand.New(rand.NewPCG(3, 5))
	for _, i := range rng.Perm(n - 52)[:20] {
		giveBack(51 + i) // not the latest (199)
	}
	if got := ask(); got != before {
		t.Fatalf("after 20 give-backs of reservations a later one followed:\n got %+v\nwant %+v (unchanged)", got, before)
	}
	remaining := n
	for remaining > 100 {
		remaining--
		giveBack(remaining) // the latest still held
	}
	// The model: the 100 remaining reservations alone, at the same instant.
	ref := &model{m: map[string]modelEntry{}}
	for range remaining {
		ref.take(&op, epoch.UnixMilli())
	}
	now := clock.Now().UnixMilli()
	want := ref.take(&probe, now)
	got := ask()
	want.Quotas[0].TTLMS = 0
	if got != want {
		t.Fatalf("after 100 cancellations:\n got %+v\nwant %+v (the 100 remaining reservations alone)", got, want)
	}
	if got.Allowed || got.Quotas[0].RetryAfterMS != 100*20-1000 {
		t.Fatalf("after 100 cancellations the next free slot is in %d ms, want %d", got.Quotas[0].RetryAfterMS, 100*20-1000)
	}
}
