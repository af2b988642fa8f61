package promlimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

var seenDecision = limit.DecisionEvent{Bucket: "/v1/notes/{id} 100p60", Handler: "/v1/notes/{id}", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket}

// TestSeenLabelSetsAllocateNothing: once a label set has been seen, every
// event method resolves its child from the cache without allocating.
func TestSeenLabelSetsAllocateNothing(t *testing.T) {
	obs := promlimit.MustNew(nil)
	events := map[string]func(){
		"Decision":      func() { obs.Decision(seenDecision) },
		"Issue":         func() { obs.Issue("100p60", limit.Issue("no-client-address")) },
		"Refund":        func() { obs.Refund("100p60", limit.RefundLaterMount) },
		"StoreError":    func() { obs.StoreError("100p60", limit.FailOpen) },
		"StoreDuration": func() { obs.StoreDuration("memory", "take", 80*time.Microsecond) },
	}
	for name, ev := range events {
		ev() // first sight: resolves and caches
		if n := testing.AllocsPerRun(1000, ev); n != 0 {
			t.Errorf("%s on a seen label set: %v allocs per call, want 0", name, n)
		}
	}
	// An event whose strings are equal to a seen set's but live elsewhere
	// (as an adapter's per-request copies do) hits the cache too.
	e := seenDecision
	e.Bucket = string([]byte(seenDecision.Bucket))
	e.Handler = string([]byte(seenDecision.Handler))
	if n := testing.AllocsPerRun(1000, func() { obs.Decision(e) }); n != 0 {
		t.Errorf("Decision with equal strings in other memory: %v allocs per call, want 0", n)
	}
}

// BenchmarkObserver measures one event on a seen label set.
func BenchmarkObserver(b *testing.B) {
	obs := promlimit.MustNew(nil)
	obs.Decision(seenDecision)
	obs.StoreDuration("memory", "take", time.Microsecond)
	b.Run("Decision", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obs.Decision(seenDecision)
		}
	})
	b.Run("Decision/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				obs.Decision(seenDecision)
			}
		})
	})
	b.Run("StoreDuration", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obs.StoreDuration("memory", "take", 80*time.Microsecond)
		}
	})
	b.Run("Decision/100-label-sets", func(b *testing.B) {
		evs := make([]limit.DecisionEvent, 100)
		for i := range evs {
			evs[i] = seenDecision
			evs[i].Handler = "/v1/r" + strconv.Itoa(i) + "/{id}"
			obs.Decision(evs[i])
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			obs.Decision(evs[i%len(evs)])
			i++
		}
	})
}

// BenchmarkCheck measures a whole allowed limiter decision on the memory
// store, without an observer and with promlimit: the difference is the cost
// of metrics per request.
func BenchmarkCheck(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		name := "no-observer"
		var opts []limit.Option
		if withMetrics {
			name = "promlimit"
			opts = append(opts, limit.WithObserver(promlimit.MustNew(nil)))
		}
		b.Run(name, func(b *testing.B) {
			clock := limittest.NewClock(epoch)
			l, err := limit.New(newMemstore(b, clock), limit.Policy{Limit: 1_000_000_000, Scope: limit.PerRoute}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			req := limit.Request{Route: "/v1/notes/{id}", Method: "GET", Path: "/v1/notes/7", Peer: "192.0.2.1:5000"}
			ctx := context.Background()
			w := limittest.NewWriter()
			l.Check(ctx, req, w)
			b.ReportAllocs()
			for b.Loop() {
				l.Check(ctx, req, w)
			}
		})
	}
}
