package conformance

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// bounds drives the policies on the boundary of what limit.New accepts
// (limittest.BoundaryPolicies) through a Limiter on the store, with random
// costs up to the capacity and random clock steps: every delay a Decision
// reports must lie in [0, the policy's own maximum] (limittest.MaxDelayMS),
// so that the store's arithmetic neither overflows nor loses range at the
// edges (2^53 for Lua doubles, the longest window, the longest refill).
func bounds(t *testing.T, newStore NewStoreFunc) {
	rng := rand.New(rand.NewPCG(12, 16))
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	ctx := context.Background()
	for i, p := range limittest.BoundaryPolicies(t, rng) {
		l, err := limit.New(store, p, limit.WithKeyPrefix("bounds"))
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		capacity, bound, w := p.Limit, limittest.MaxDelayMS(p), p.Window
		if p.Algorithm == limit.TokenBucket {
			capacity = p.Burst
		}
		id := "id" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		for step := 0; step < 40; step++ {
			switch rng.IntN(4) {
			case 0:
			case 1:
				clock.Advance(time.Millisecond)
			default:
				clock.Advance(time.Duration(rng.Int64N(int64(2*w) + 1)))
			}
			cost := int64(1)
			switch rng.IntN(3) {
			case 0:
				cost = capacity
			case 1:
				cost = 1 + rng.Int64N(capacity)
			}
			d, err := l.ConsumeN(ctx, id, cost)
			if err != nil {
				t.Fatalf("%+v, step %d: %v", p, step, err)
			}
			if d.ResetAfter < 0 || d.RetryAfter < 0 || d.ResetAfter.Milliseconds() > bound || d.RetryAfter.Milliseconds() > bound || d.Remaining > capacity {
				t.Fatalf("%+v, step %d, cost %d: %+v, want delays in [0, %d ms] and Remaining at most %d", p, step, cost, d, bound, capacity)
			}
		}
	}
}
