package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// trivialScript is the baseline: one EVALSHA through rueidis that touches
// nothing and returns 1, on the same keys (so the same routing) as the store.
var trivialScript = rueidis.NewLuaScript("return 1")

// BenchmarkRedis measures decisions per second on loopback at 64 and 256
// goroutines: the raw EVALSHA baseline, Store.Take, and a whole engine
// decision (Limiter.Consume), over 1024 identities with a limit high enough
// that nearly every call is admitted (the write path). Compare
// decisions/s of store-take with raw-evalsha in the same run.
//
//	. DIR/env && go test -run '^$' -bench Redis -benchtime 1s
func BenchmarkRedis(b *testing.B) {
	url := skipNoEnv(b, envURL, "benchmark (real standalone Redis)")
	s, err := NewFromURL(url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	prefix := testPrefix(b)
	defer deleteKeys(b, s.Client(), prefix)
	const nkeys = 1024
	ops := make([]limit.Op, nkeys)
	keys := make([][]string, nkeys)
	ids := make([]string, nkeys)
	for i := range ops {
		ids[i] = fmt.Sprintf("client-%d", i)
		k := opKey(prefix, "1000000p60", limit.SlidingWindow, ids[i])
		ops[i] = oneQuota(k, limit.Quota{Algorithm: limit.SlidingWindow,
			Limit: 1_000_000, WindowMS: 60_000, PhaseMS: int64(i) * 37 % 60_000}, 1)
		keys[i] = []string{k}
	}
	lim := limittest.MustNew(s, limit.Policy{Limit: 1_000_000, Window: time.Minute},
		limit.WithKeyPrefix(prefix), limit.WithStoreTimeout(time.Second))
	c := s.Client()
	ctx := context.Background()
	for _, g := range []int{64, 256} {
		b.Run(fmt.Sprintf("raw-evalsha/g=%d", g), func(b *testing.B) {
			parallel(b, g, func(i int) error { return trivialScript.Exec(ctx, c, keys[i%nkeys], nil).Error() })
		})
		b.Run(fmt.Sprintf("store-take/g=%d", g), func(b *testing.B) {
			parallel(b, g, func(i int) error {
				_, err := s.Take(ctx, &ops[i%nkeys])
				return err
			})
		})
		b.Run(fmt.Sprintf("limiter-consume/g=%d", g), func(b *testing.B) {
			parallel(b, g, func(i int) error {
				_, err := lim.Consume(ctx, ids[i%nkeys])
				return err
			})
		})
	}
}

// parallel runs f from g goroutines and reports decisions/s.
func parallel(b *testing.B, g int, f func(i int) error) {
	b.ReportAllocs()
	b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if err := f(i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
