package promlimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// Requests that waited for a reserved slot are counted per bucket and
// result in quotagate_wait_seconds, with their waits, in the fixed buckets.
func TestWaitSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := promlimit.MustNew(nil)
		store, err := memstore.New(memstore.WithClock(time.Now))
		if err != nil {
			t.Fatal(err)
		}
		l, err := limit.New(store, limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second}, limit.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		l.Consume(ctx, "c") // at once: no wait recorded
		for range 2 {
			go l.Consume(ctx, "c") // 200 ms, 400 ms
			synctest.Wait()
		}
		cctx, cancel := context.WithCancel(ctx)
		go l.Consume(cctx, "c") // slot at 600 ms, cancelled at 50 ms
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		cancel()
		time.Sleep(time.Second)
		synctest.Wait()
		got := map[string][2]float64{}
		for _, mf := range gather(t, obs) {
			if mf.GetName() != promlimit.WaitSeconds {
				continue
			}
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				if n := len(h.GetBucket()); n != len(promlimit.WaitBuckets()) {
					t.Errorf("%d buckets, want the %d fixed ones", n, len(promlimit.WaitBuckets()))
				}
				got[labels(m)["bucket"]+"/"+labels(m)["result"]] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
			}
		}
		want := map[string][2]float64{"feed/served": {2, 0.6}, "feed/cancelled": {1, 0.05}}
		if len(got) != len(want) {
			t.Fatalf("series %v, want %v", got, want)
		}
		for k, w := range want {
			if g := got[k]; g[0] != w[0] || g[1] < w[1]-1e-9 || g[1] > w[1]+1e-9 {
				t.Errorf("%s: count %v sum %v, want %v %v", k, g[0], g[1], w[0], w[1])
			}
		}
	})
}
