package otellimit_test

import (
	"context"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	otellimit "github.com/quotagate/quotagate/metrics/otel"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Once an attribute set has been seen, recording it allocates nothing: with
// the OTel SDK (a real MeterProvider with a reader) and with the noop one.
func TestWarmEventsDoNotAllocate(t *testing.T) {
	sdk, _ := newObserver(t)
	nop, err := otellimit.New(noop.NewMeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	e := limit.DecisionEvent{Bucket: "100p60", Handler: "/v1/notes/{id}", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket}
	for name, obs := range map[string]*otellimit.Observer{"sdk": sdk, "noop": nop} {
		for event, fn := range map[string]func(){
			"decision":       func() { obs.Decision(e) },
			"store_duration": func() { obs.StoreDuration("memory", "take", 80*time.Microsecond) },
			"store_error":    func() { obs.StoreError("100p60", limit.FailOpen) },
			"issue":          func() { obs.Issue("100p60", "no-client-address") },
			"refund":         func() { obs.Refund("100p60", limit.RefundLaterMount) },
			"skipped":        func() { obs.StoreEvent("redis", "deny-cache") },
			"wait":           func() { obs.Wait("feed", 20*time.Millisecond, true) },
			"slots":          func() { obs.Slots("slow", 1); obs.Slots("slow", -1) },
			"blocked": func() {
				obs.Decision(limit.DecisionEvent{Bucket: "otp", Outcome: limit.OutcomeLimited, KeySource: limit.KeySourceSocket, Blocked: true})
			},
		} {
			t.Run(name+"/"+event, func(t *testing.T) {
				for range 100 { // warm: the cache promotes a set to its lock-free map
					fn()
				}
				if n := testing.AllocsPerRun(1000, fn); n != 0 {
					t.Fatalf("%v allocations per event, want 0", n)
				}
			})
		}
	}
}

// A whole allowed decision of a warm Limiter allocates as much with the
// Observer on the OTel SDK as with no observer: the metrics add nothing per
// request.
func TestAllowedCheckAllocatesNothingMore(t *testing.T) {
	sdk, _ := newObserver(t)
	allocs := func(opts ...limit.Option) float64 {
		clock := limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := limit.New(limittest.NewStore(clock.Now), limit.Policy{Limit: 1_000_000_000, Scope: limit.PerRoute}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		req := limit.Request{Route: "/v1/notes/{id}", Method: "GET", Path: "/v1/notes/7", Peer: "192.0.2.1:5000"}
		w := limittest.NewWriter()
		for range 100 { // warm
			l.Check(context.Background(), req, w)
		}
		if d := l.Check(context.Background(), req, w); !d.Allowed {
			t.Fatalf("decision %+v, want allowed", d)
		}
		return testing.AllocsPerRun(1000, func() { l.Check(context.Background(), req, w) })
	}
	without, with := allocs(), allocs(limit.WithObserver(sdk))
	t.Logf("allocations per allowed Check: %v without an observer, %v with otellimit on the SDK", without, with)
	if with != without {
		t.Fatalf("%v allocations per allowed Check with otellimit, %v without: the observer allocates", with, without)
	}
}

func BenchmarkDecision(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	obs, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		b.Fatal(err)
	}
	e := limit.DecisionEvent{Bucket: "100p60", Handler: "/v1/notes/{id}", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket}
	obs.Decision(e)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Decision(e)
		}
	})
}
