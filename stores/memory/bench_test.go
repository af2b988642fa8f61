package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// BenchmarkDecision measures one engine + memory store decision (allowed path,
// default disclosure), serial and parallel, over 1 key and 100 000 keys.
func BenchmarkDecision(b *testing.B) {
	for _, keys := range []int{1, 100_000} {
		peers := make([]string, keys)
		for i := range peers {
			peers[i] = peer(i)
		}
		newLimiter := func(b *testing.B) *limit.Limiter {
			s, err := memstore.New()
			if err != nil {
				b.Fatal(err)
			}
			// a quota no benchmark can exhaust: measure the allowed path
			return limittest.MustNew(s, limit.Policy{Limit: 1 << 28, Window: time.Hour})
		}
		b.Run("serial/keys="+strconv.Itoa(keys), func(b *testing.B) {
			l := newLimiter(b)
			ctx := context.Background()
			w := limittest.NewWriter()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Check(ctx, limit.Request{Peer: peers[i%keys]}, w)
				i++
			}
		})
		b.Run("parallel/keys="+strconv.Itoa(keys), func(b *testing.B) {
			l := newLimiter(b)
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				w := limittest.NewWriter()
				for pb.Next() {
					l.Check(ctx, limit.Request{Peer: peers[i%keys]}, w)
					i++
				}
			})
		})
	}
}

// benchDecisions times decisions on a fresh store of MaxKeys maxKeys whose
// fake clock advances 0.25 ms per decision (4 000 per second): decide(i)
// makes decision i; the first prefill are made before the timer starts.
func benchDecisions(b *testing.B, maxKeys, prefill int, newDecide func(*memstore.Store) func(i int)) {
	clock := limittest.NewClock(epoch)
	s, err := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxKeys(maxKeys))
	if err != nil {
		b.Fatal(err)
	}
	decide := newDecide(s)
	i := 0
	step := func() {
		clock.Advance(250 * time.Microsecond)
		decide(i)
		i++
	}
	for range prefill {
		step()
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(s.Len()), "keys")
}

// BenchmarkFullStoreCost: engine + memory store, every
// decision for an identity never seen before, default policy (sliding
// window, 100 per minute). below-cap: MaxKeys far above what the flood
// holds, so the tables only grow; at-cap: default MaxKeys, so every decision
// evicts or reclaims. Both are first given DefaultMaxKeys identities (at-cap
// twice as many, to fill every shard), untimed, so that they start with
// tables of one size. The at-cap figure must
// stay within 2x of the below-cap one.
func BenchmarkFullStoreCost(b *testing.B) {
	consume := func(s *memstore.Store) func(int) {
		l := limittest.MustNew(s, limit.Policy{})
		id := make([]byte, 0, 32)
		return func(i int) {
			id = strconv.AppendInt(append(id[:0], "client-"...), int64(i), 10)
			if _, err := l.Consume(context.Background(), string(id)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("below-cap", func(b *testing.B) { benchDecisions(b, 1<<26, memstore.DefaultMaxKeys, consume) })
	b.Run("at-cap", func(b *testing.B) { benchDecisions(b, memstore.DefaultMaxKeys, 2*memstore.DefaultMaxKeys, consume) })
}

// BenchmarkTake measures Take alone, a sliding-window quota. existing-key
// decides for one key again and again (its table in cache); new-key for a
// key never seen before each time, below the cap (MaxKeys far above what the
// flood holds) and at it (default MaxKeys), after untimed new keys as in
// BenchmarkFullStoreCost.
func BenchmarkTake(b *testing.B) {
	take := func(fresh bool) func(*memstore.Store) func(int) {
		return func(s *memstore.Store) func(int) {
			op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: limit.SlidingWindow, Limit: 100, WindowMS: 60_000}}}
			if !fresh {
				op.Quotas[0].Limit = 1 << 30 // never exhausted
			}
			key := make([]byte, 0, 64)
			return func(i int) {
				if fresh || i == 0 {
					key = strconv.AppendInt(append(key[:0], "qg:{"...), int64(i), 16)
					op.Quotas[0].Key = append(key, "}:100p60:s:r:k=client"...)
				}
				if res, _ := limittest.Take(context.Background(), s, &op); !res.Allowed {
					b.Fatal("denied")
				}
			}
		}
	}
	b.Run("existing-key", func(b *testing.B) { benchDecisions(b, memstore.DefaultMaxKeys, 0, take(false)) })
	b.Run("new-key/below-cap", func(b *testing.B) { benchDecisions(b, 1<<26, memstore.DefaultMaxKeys, take(true)) })
	b.Run("new-key/at-cap", func(b *testing.B) { benchDecisions(b, memstore.DefaultMaxKeys, 2*memstore.DefaultMaxKeys, take(true)) })
}
