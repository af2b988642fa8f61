package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// RunStore runs the store-level scenarios against stores made by newStore:
// random operation sequences of every algorithm compared field by field with
// the engine's own math (limit.Op.Apply over a plain map), concurrency
// exactness on one key, key independence, and the numbers of policies on the
// boundary of what limit.New accepts.
func RunStore(t *testing.T, newStore NewStoreFunc) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run("differential-"+alg.String(), func(t *testing.T) { differential(t, alg, newStore) })
	}
	t.Run("concurrency-exactness", func(t *testing.T) { concurrency(t, newStore) })
	t.Run("keys-are-independent", func(t *testing.T) { independence(t, newStore) })
	t.Run("accepted-policies-give-in-range-numbers", func(t *testing.T) { bounds(t, newStore) })
}

// model is the reference: the engine's math over a map with TTLs.
type model struct {
	m map[string]modelEntry
}

type modelEntry struct {
	st  limit.State
	exp int64
}

func (m *model) take(op *limit.Op, now int64) limit.Result {
	e, ok := m.m[string(op.Key)]
	if ok && e.exp <= now {
		e = modelEntry{}
	}
	next, res := op.Apply(e.st, now)
	if res.Allowed {
		m.m[string(op.Key)] = modelEntry{next, now + res.TTLMS}
	}
	return res
}

func randomOp(rng *rand.Rand, alg limit.Algorithm, key string) limit.Op {
	lim := 1 + rng.Int64N(8)
	w := lim * (1 + rng.Int64N(500))
	op := limit.Op{Key: []byte(key), Hash: rng.Uint64(), Algorithm: alg, Limit: lim, WindowMS: w}
	switch alg {
	case limit.TokenBucket:
		op.Burst = 1 + rng.Int64N(8)
		op.IntervalMS = w / lim
	default:
		op.PhaseMS = rng.Int64N(w)
	}
	return op
}

func differential(t *testing.T, alg limit.Algorithm, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	ref := &model{m: map[string]modelEntry{}}
	rng := rand.New(rand.NewPCG(uint64(alg), 7))
	const keys = 4
	var ops [keys]limit.Op
	for i := range ops {
		ops[i] = randomOp(rng, alg, fmt.Sprintf("conformance:{k%d}:b:%c:r:id", i, "fsg"[alg]))
	}
	for step := 0; step < 2000; step++ {
		switch rng.IntN(4) {
		case 0:
		case 1:
			clock.Advance(time.Duration(rng.Int64N(3)) * time.Millisecond)
		default:
			clock.Advance(time.Duration(rng.Int64N(600)) * time.Millisecond)
		}
		op := ops[rng.IntN(keys)]
		capacity := op.Limit
		if alg == limit.TokenBucket {
			capacity = op.Burst
		}
		op.Cost = rng.Int64N(capacity + 2)
		now := clock.Now().UnixMilli()
		want := ref.take(&op, now)
		got, err := store.Take(context.Background(), &op)
		if err != nil {
			t.Fatalf("step %d: Take: %v", step, err)
		}
		got.TTLMS, want.TTLMS = 0, 0 // a store need not report the TTL it applied
		if got != want {
			t.Fatalf("step %d (%+v at %d):\n got %+v\nwant %+v", step, op, now, got, want)
		}
	}
}

func concurrency(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		op := limit.Op{Key: []byte(fmt.Sprintf("conformance:{c}:b:%c:r:x", "fsg"[alg])), Algorithm: alg,
			Limit: 10, Burst: 10, WindowMS: 10_000, IntervalMS: 1000, Cost: 1}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 100; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := op
				o.Key = append([]byte(nil), op.Key...)
				<-start
				res, err := store.Take(context.Background(), &o)
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if allowed.Load() != 10 {
			t.Fatalf("%s: %d of 100 concurrent calls admitted, want exactly 10", alg, allowed.Load())
		}
	}
}

func independence(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	a := limit.Op{Key: []byte("conformance:{a}:b:f:r:a"), Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 1000, Cost: 1}
	b := a
	b.Key = []byte("conformance:{b}:b:f:r:b")
	for _, op := range []*limit.Op{&a, &b} {
		if res, err := store.Take(context.Background(), op); err != nil || !res.Allowed {
			t.Fatalf("first call on %s: %+v %v", op.Key, res, err)
		}
	}
	if res, _ := store.Take(context.Background(), &a); res.Allowed {
		t.Fatal("second call on a full key admitted")
	}
}
