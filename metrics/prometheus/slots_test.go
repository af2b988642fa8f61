package promlimit_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

// The gauge follows the slots taken and given back; refusals are the
// bucket's limited requests.
func TestSlotsInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Name: "slow", Algorithm: limit.Concurrency, Limit: 2}, limit.WithObserver(o))
	ctx := context.Background()
	a, _ := l.Consume(ctx, "k")
	b, _ := l.Consume(ctx, "k")
	c, _ := l.Consume(ctx, "k")
	if !a.Allowed || !b.Allowed || c.Allowed {
		t.Fatal("want 2 admitted, 1 refused")
	}
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == promlimit.SlotsInFlight {
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == "slow" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	if g := gauge(); g != 2 {
		t.Fatalf("gauge %v with 2 held, want 2", g)
	}
	l.Finish(ctx, &a, 0)
	l.Finish(ctx, &a, 0) // twice: counted once
	if g := gauge(); g != 1 {
		t.Fatalf("gauge %v after one release, want 1", g)
	}
	l.Finish(ctx, &b, 0)
	if g := gauge(); g != 0 {
		t.Fatalf("gauge %v after both, want 0", g)
	}
	if g := gauge(); g != 0 {
		t.Fatalf("gauge %v, want 0 once every slot is back", g)
	}
}
