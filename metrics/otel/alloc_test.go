package otellimit_test

import (
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
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
