package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
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
