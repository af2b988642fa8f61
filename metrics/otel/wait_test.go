package otellimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	otellimit "github.com/quotagate/quotagate/metrics/otel"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Requests that waited for a reserved slot are recorded per bucket and
// result in quotagate.wait, with their waits, in the fixed buckets.
func TestWaitThroughTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs, reader := newObserver(t)
		l, err := limit.New(limittest.NewStore(time.Now), limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second}, limit.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		l.Consume(ctx, "c")
		for range 2 {
			go l.Consume(ctx, "c")
			synctest.Wait()
		}
		cctx, cancel := context.WithCancel(ctx)
		go l.Consume(cctx, "c")
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		cancel()
		time.Sleep(time.Second)
		synctest.Wait()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string][2]float64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != otellimit.Wait {
					continue
				}
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					if len(p.Bounds) != len(otellimit.WaitBuckets()) {
						t.Errorf("bounds %v, want the fixed %v", p.Bounds, otellimit.WaitBuckets())
					}
					b, _ := p.Attributes.Value("bucket")
					r, _ := p.Attributes.Value("result")
					got[b.AsString()+"/"+r.AsString()] = [2]float64{float64(p.Count), p.Sum}
				}
			}
		}
		want := map[string][2]float64{"feed/served": {2, 0.6}, "feed/cancelled": {1, 0.05}}
		if len(got) != len(want) {
			t.Fatalf("points %v, want %v", got, want)
		}
		for k, w := range want {
			if g := got[k]; g[0] != w[0] || g[1] < w[1]-1e-9 || g[1] > w[1]+1e-9 {
				t.Errorf("%s: count %v sum %v, want %v %v", k, g[0], g[1], w[0], w[1])
			}
		}
	})
}
