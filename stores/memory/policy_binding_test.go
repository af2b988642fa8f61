package memstore_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// Case C-03 (issue 12) on the memory store: one Name, two policies
// (FixedWindow 5 per hour and 5 per second), alternating on one identity.
// They shared one record: the hour's limiter answered a Retry-After of
// ~242 years. Each policy now has its own record, so every delay stays
// within its own window.
func TestRegressionC03OneNameTwoPolicies(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := memstore.New(memstore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	hour := limittest.MustNew(s, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour})
	sec := limittest.MustNew(s, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second})
	ctx := context.Background()
	admitted := map[*limit.Limiter]int{}
	for i := 0; i < 10; i++ {
		for _, l := range []*limit.Limiter{hour, sec} {
			d, err := l.Consume(ctx, "id")
			if err != nil || d.RetryAfter > time.Hour || d.ResetAfter > time.Hour || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("call %d: %+v, %v: want every delay within the hour", i, d, err)
			}
			if d.Allowed {
				admitted[l]++
			}
		}
		clock.Advance(time.Second)
	}
	// The hour admits 5 of 10; the second admits all 10 (one call per
	// window of its own): neither counts the other's calls.
	if admitted[hour] != 5 || admitted[sec] != 10 {
		t.Fatalf("admitted %d (hour) and %d (second), want 5 and 10", admitted[hour], admitted[sec])
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("%d records, want one per policy", n)
	}
}

// Issue 12, item 5, on the memory store: two Limiters built separately from
// one policy with no Name shared one allowance without saying so. New now
// refuses the second while the first is alive on the store; one Name on
// both shares on purpose.
func TestRegressionIdenticalLimitersDoNotShareSilently(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	p := limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
	a := limittest.MustNew(s, p)
	if _, err := limit.New(s, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("second unnamed Limiter with the same numbers: %v, want ErrInvalidPolicy", err)
	}
	p.Name = "shared"
	b1, b2 := limittest.MustNew(s, p), limittest.MustNew(s, p)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		[]*limit.Limiter{b1, b2}[i%2].Consume(ctx, "u")
	}
	if d, _ := b2.Consume(ctx, "u"); d.Allowed {
		t.Fatal("one Name on both: the 6th call was admitted, want the one allowance of 5")
	}
	runtime.KeepAlive(a)
}
