package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

// TestBlockedRequestsThroughTheEngine: quotagate_blocked_requests_total
// counts the requests a block limited (the one that began it and those
// during it); quotagate_requests_total counts them limited too.
func TestBlockedRequestsThroughTheEngine(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := limittest.NewClock(time.UnixMilli(1_767_225_600_000))
	l, err := limit.New(limittest.NewStore(c.Now), limit.Policy{Name: "otp", Limit: 1, Window: time.Second, BlockFor: 8 * time.Second},
		limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.Consume(context.Background(), "client"); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "outcome" {
					name += "/" + lp.GetValue()
				}
			}
			if m.GetCounter() != nil {
				got[name] += m.GetCounter().GetValue()
				if name == promlimit.BlockedTotal {
					got["series"]++
				}
			}
		}
	}
	if got["series"] != 1 || got[promlimit.BlockedTotal] != 2 || got[promlimit.RequestsTotal+"/limited"] != 2 || got[promlimit.RequestsTotal+"/allowed"] != 1 {
		t.Fatalf("counters %v: want one blocked series of 2, 2 limited, 1 allowed", got)
	}
}
