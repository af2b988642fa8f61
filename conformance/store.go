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

// RunStore runs the store-level scenarios against stores made by newStore:
// random operation sequences of every algorithm (Ops of one or two quotas
// under one hash tag, refunds of earlier charges; token buckets reserving
// slots and cancelling them) compared field by field
// with the engine's own math (limitstore.Op.Apply over a plain map), concurrency
// exactness on one key, key independence, the numbers of policies on the
// boundary of what limit.New accepts, and Limiters of several quotas and
// plans deciding as on the reference store; and, for a
// limitstore.Resetter, the same differential with Peeks and Resets mixed
// in, Limiter.Peek and Reset as on the reference store, a Reset racing
// 200 requests and the refunds of requests charged before it, refunds
// of charges taken before a Reset giving nothing back after it, blocks
// as the brute-force models say (charges of policies that count by status
// finished at random), and successes in flight never beginning a block.
func RunStore(t *testing.T, newStore NewStoreFunc) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run("differential-"+alg.String(), func(t *testing.T) { differential(t, alg, newStore) })
	}
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run("refund-decisions-"+alg.String(), func(t *testing.T) { refundDecisions(t, alg, newStore) })
	}
	t.Run("reserve-and-cancel-as-the-model", func(t *testing.T) { reserveDifferential(t, newStore) })
	t.Run("cancelled-reservations-given-back-exactly", func(t *testing.T) { reserveCancelExact(t, newStore) })
	t.Run("concurrency-exactness", func(t *testing.T) { concurrency(t, newStore) })
	t.Run("count-by-status-exactness", func(t *testing.T) { countByStatusExact(t, newStore) })
	t.Run("keys-are-independent", func(t *testing.T) { independence(t, newStore) })
	t.Run("accepted-policies-give-in-range-numbers", func(t *testing.T) { bounds(t, newStore) })
	t.Run("several-quotas-and-plans-as-the-reference", func(t *testing.T) { policies(t, newStore) })
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run("peek-and-reset-differential-"+alg.String(), func(t *testing.T) { peekResetDifferential(t, alg, newStore) })
	}
	t.Run("peek-and-reset-through-limiters-as-the-reference", func(t *testing.T) { peekResetPolicies(t, newStore) })
	t.Run("reset-races-200-requests", func(t *testing.T) { resetRacesRequests(t, newStore) })
	t.Run("reset-then-refund-as-the-model", func(t *testing.T) { resetThenRefund(t, newStore) })                                     // resetrefund.go
	t.Run("reset-then-refund-through-limiters-as-the-reference", func(t *testing.T) { resetThenRefundThroughLimiters(t, newStore) }) // resetrefund.go
	t.Run("reset-then-later-mount-refund-as-the-reference", func(t *testing.T) { resetThenLaterMountRefund(t, newStore) })           // resetrefund.go
	t.Run("blocks-as-the-models", func(t *testing.T) { blocksAsTheModels(t, newStore) })                                             // blocks.go
	t.Run("unsettled-charges-hold-off-blocks", func(t *testing.T) { unsettledChargesHoldOffBlocks(t, newStore) })                    // blocks.go
}

// model is the reference: the engine's math over a map with TTLs, written
// as the store contract says.
type model struct {
	m map[string]modelEntry
}

type modelEntry struct {
	st  limitstore.State
	exp int64
}

func (m *model) take(op *limitstore.Op, now int64) limitstore.Result {
	var sts [limitstore.MaxQuotas]limitstore.State
	for i := range op.N {
		if e, ok := m.m[string(op.Quotas[i].Key)]; ok && e.exp > now {
			sts[i] = e.st
		}
	}
	res := op.Apply(&sts, now)
	for i := range op.N {
		k, ttl := string(op.Quotas[i].Key), res.Quotas[i].TTLMS
		e, ok := m.m[k]
		switch {
		case ttl <= 0:
		case op.Refund:
			if ok && e.exp > now {
				m.m[k] = modelEntry{sts[i], e.exp}
			}
		default:
			m.m[k] = modelEntry{sts[i], now + ttl}
		}
	}
	return res
}

// reset is a Reset of keys at now, as the store contract says: a live
// State becomes the empty State of the next epoch, keeping its expiry;
// anything else is forgotten.
func (m *model) reset(keys [][]byte, now int64) {
	for _, k := range keys {
		if e, ok := m.m[string(k)]; ok && e.exp > now {
			m.m[string(k)] = modelEntry{limitstore.State{Epoch: e.st.Epoch + 1}, e.exp}
		} else {
			delete(m.m, string(k))
		}
	}
}

// oneQuota is an Op of one quota on key.
func oneQuota(key string, q limitstore.Quota) limitstore.Op {
	q.Key = []byte(key)
	return limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}
}

func randomQuota(rng *rand.Rand, alg limit.Algorithm, key string) limitstore.Quota {
	q := limitstore.Quota{Key: []byte(key), Algorithm: alg, Limit: 1 + rng.Int64N(8), WindowMS: 1 + rng.Int64N(4000)}
	switch alg {
	case limit.TokenBucket:
		q.Burst = 1 + rng.Int64N(8)
	default:
		q.PhaseMS = rng.Int64N(q.WindowMS)
	}
	return q
}

// stepClock is the fake clock of the differential scenarios, which
// compare a store with a model or the reference store at the same
// readings: it moves by the scenario's steps, and never falls behind real
// time since an earlier reading (limittest.RealTimeFloor). A Redis row's
// keys expire on the server's real clock: a reading that stood still while
// a loaded machine stalled the test for longer than a key's time to live
// found the key gone where the model still held its state.
type stepClock struct {
	*limittest.Clock
	set func(ms int64) int64
}

// newStepClock returns a stepClock at epoch.
func newStepClock() *stepClock {
	c := limittest.NewClock(epoch)
	sc := &stepClock{Clock: c, set: limittest.RealTimeFloor(func(ms int64) { c.Set(time.UnixMilli(ms)) })}
	sc.set(epoch.UnixMilli())
	return sc
}

// Advance moves the clock by d (whole ms), or further to keep up with real
// time.
func (c *stepClock) Advance(d time.Duration) { c.set(c.Now().Add(d).UnixMilli()) }

// randomStep advances clock by nothing (a quarter of the calls), by 0-2 ms
// (a quarter) or by up to longest in whole ms (each of them or further:
// see stepClock).
func randomStep(rng *rand.Rand, clock *stepClock, longest time.Duration) {
	switch rng.IntN(4) {
	case 0:
	case 1:
		clock.Advance(time.Duration(rng.Int64N(3)) * time.Millisecond)
	default:
		clock.Advance(time.Duration(rng.Int64N(longest.Milliseconds())) * time.Millisecond)
	}
}

func differential(t *testing.T, alg limit.Algorithm, newStore NewStoreFunc) {
	clock := newStepClock()
	store := newStore(t, clock.Now)
	ref := &model{m: map[string]modelEntry{}}
	rng := rand.New(rand.NewPCG(uint64(alg), 7))
	const keys = 4
	var ops [keys]limitstore.Op
	for i := range ops {
		ops[i] = limitstore.Op{N: 1 + i%2}
		for j := range ops[i].N {
			ops[i].Quotas[j] = randomQuota(rng, alg, fmt.Sprintf("conformance:{k%d}:b%d:%c:r:id", i, j, "fsg"[alg]))
		}
	}
	var charges []limitstore.Op
	for step := 0; step < 2000; step++ {
		randomStep(rng, clock, 600*time.Millisecond)
		op := ops[rng.IntN(keys)]
		capacity := int64(1 << 62)
		for j := range op.N {
			capacity = min(capacity, op.Quotas[j].Limit)
			if alg == limit.TokenBucket {
				capacity = min(capacity, op.Quotas[j].Burst)
			}
		}
		op.Cost = rng.Int64N(capacity + 2)
		if len(charges) > 0 && rng.IntN(6) == 0 {
			op = charges[rng.IntN(len(charges))]
			op.Refund = true
		}
		now := clock.Now().UnixMilli()
		want := ref.take(&op, now)
		got, err := limittest.Take(context.Background(), store, &op)
		if err != nil {
			t.Fatalf("step %d: Take: %v", step, err)
		}
		for j := range limitstore.MaxQuotas { // a store need not report the TTL it applied
			got.Quotas[j].TTLMS, want.Quotas[j].TTLMS = 0, 0
		}
		if got != want {
			t.Fatalf("step %d (%+v at %d):\n got %+v\nwant %+v", step, op, now, got, want)
		}
		if got.Allowed && !op.Refund {
			for j := range op.N {
				op.Quotas[j].Window, op.Quotas[j].Epoch = got.Quotas[j].Window, got.Quotas[j].Epoch
			}
			charges = append(charges, op)
		}
	}
}

func concurrency(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		op := oneQuota(fmt.Sprintf("conformance:{c}:b:%c:r:x", "fsg"[alg]),
			limitstore.Quota{Algorithm: alg, Limit: 10, Burst: 10, WindowMS: 10_000})
		allowed := admittedAtOnce(t, store, op, 100)
		if allowed != 10 {
			t.Fatalf("%s: %d of 100 concurrent calls admitted, want exactly 10", alg, allowed)
		}
	}
	// Several quotas: never more admitted than every quota allows.
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		op := oneQuota(fmt.Sprintf("conformance:{m}:b:%c:r:x", "fsg"[alg]), limitstore.Quota{Algorithm: alg, Limit: 10, Burst: 10, WindowMS: 10_000})
		op.N, op.Quotas[1] = 2, limitstore.Quota{Key: []byte(fmt.Sprintf("conformance:{m}:b2:%c:r:x", "fsg"[alg])), Algorithm: alg, Limit: 4, Burst: 4, WindowMS: 60_000}
		if n := admittedAtOnce(t, store, op, 100); n != 4 {
			t.Fatalf("%s, quotas of 10 and 4: %d of 100 concurrent calls admitted, want exactly 4", alg, n)
		}
	}
}

// admittedAtOnce sends n copies of op at once and counts the admitted ones.
func admittedAtOnce(t *testing.T, store limitstore.Store, op limitstore.Op, n int) int64 {
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			o := op
			for j := range o.N {
				o.Quotas[j].Key = slices.Clone(op.Quotas[j].Key)
			}
			<-start
			res, err := limittest.Take(context.Background(), store, &o)
			if err != nil {
				t.Errorf("Take: %v", err)
				return
			}
			if res.Allowed {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return allowed.Load()
}

func independence(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 1000}
	a, b := oneQuota("conformance:{a}:b:f:r:a", q), oneQuota("conformance:{b}:b:f:r:b", q)
	for _, op := range []*limitstore.Op{&a, &b} {
		if res, err := limittest.Take(context.Background(), store, op); err != nil || !res.Allowed {
			t.Fatalf("first call on %s: %+v %v", op.Quotas[0].Key, res, err)
		}
	}
	if res, _ := limittest.Take(context.Background(), store, &a); res.Allowed {
		t.Fatal("second call on a full key admitted")
	}
}
