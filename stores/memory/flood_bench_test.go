package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// BenchmarkC01FullStoreCost is case C-01: engine + memory store, every
// decision for an identity never seen before, the fake clock advancing
// 0.25 ms per decision (4 000 new identities per second), default policy
// (sliding window, 100 per minute). below-cap: MaxKeys far above what the
// flood holds, so the table only grows; at-cap: default MaxKeys, filled to
// the cap before the timer starts, so every decision evicts or reclaims.
// The at-cap figure must stay within 2x of the below-cap one.
func BenchmarkC01FullStoreCost(b *testing.B) {
	run := func(b *testing.B, maxKeys, prefill int) {
		clock := limittest.NewClock(epoch)
		s, err := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxKeys(maxKeys))
		if err != nil {
			b.Fatal(err)
		}
		l := limit.MustNew(s, limit.Policy{})
		ctx := context.Background()
		id := make([]byte, 0, 32)
		i := 0
		next := func() {
			id = strconv.AppendInt(append(id[:0], "client-"...), int64(i), 10)
			i++
			clock.Advance(250 * time.Microsecond)
			if _, err := l.Consume(ctx, string(id)); err != nil {
				b.Fatal(err)
			}
		}
		for range prefill {
			next()
		}
		b.ReportAllocs()
		for b.Loop() {
			next()
		}
		b.ReportMetric(float64(s.Len()), "keys")
	}
	b.Run("below-cap", func(b *testing.B) { run(b, 1<<26, 0) })
	b.Run("at-cap", func(b *testing.B) { run(b, memstore.DefaultMaxKeys, 2*memstore.DefaultMaxKeys) })
}

// BenchmarkTake measures Take alone: a sliding-window quota of 100 per
// minute, the fake clock advancing 0.25 ms per decision. existing-key
// decides for one key again and again (the table in cache); new-key decides
// for a key never seen before each time, below the cap (MaxKeys far above
// what the flood holds) and at it (default MaxKeys, filled before the
// timer starts).
func BenchmarkTake(b *testing.B) {
	run := func(b *testing.B, maxKeys, prefill int, fresh bool) {
		clock := limittest.NewClock(epoch)
		s, err := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxKeys(maxKeys))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		op := limit.Op{Cost: 1, N: 1, Quotas: [limit.MaxQuotas]limit.Quota{{Algorithm: limit.SlidingWindow, Limit: 100, WindowMS: 60_000}}}
		if !fresh {
			op.Quotas[0].Limit = 1 << 40 // never exhausted
		}
		key := make([]byte, 0, 64)
		i := 0
		next := func() {
			if fresh || i == 0 {
				key = strconv.AppendInt(append(key[:0], "qg:{"...), int64(i), 16)
				key = append(key, "}:100p60:s:r:k=client"...)
				op.Quotas[0].Key = key
			}
			i++
			clock.Advance(250 * time.Microsecond)
			if res, _ := s.Take(ctx, &op); !res.Allowed {
				b.Fatal("denied")
			}
		}
		for range prefill {
			next()
		}
		b.ReportAllocs()
		for b.Loop() {
			next()
		}
		b.ReportMetric(float64(s.Len()), "keys")
	}
	b.Run("existing-key", func(b *testing.B) { run(b, memstore.DefaultMaxKeys, 0, false) })
	b.Run("new-key/below-cap", func(b *testing.B) { run(b, 1<<26, 0, true) })
	b.Run("new-key/at-cap", func(b *testing.B) { run(b, memstore.DefaultMaxKeys, 2*memstore.DefaultMaxKeys, true) })
}
