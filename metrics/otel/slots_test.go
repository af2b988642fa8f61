package otellimit_test

import (
	"context"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The counter follows the slots taken and given back; refusals are the
// bucket's limited requests.
func TestSlotsInFlight(t *testing.T) {
	obs, reader := newObserver(t)
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Name: "slow", Algorithm: limit.Concurrency, Limit: 2}, limit.WithObserver(obs))
	ctx := context.Background()
	a, _ := l.Consume(ctx, "k")
	b, _ := l.Consume(ctx, "k")
	l.Consume(ctx, "k")
	l.Finish(ctx, &a, 0)
	l.Finish(ctx, &a, 0) // twice: counted once
	_ = b
	equal(t, points(t, reader), []string{
		"quotagate.concurrency.slots_in_flight{bucket=slow} 1",
		"quotagate.requests{bucket=slow,handler=,key_source=consume,outcome=allowed,plan=} 2",
		"quotagate.requests{bucket=slow,handler=,key_source=consume,outcome=degraded,plan=} 0",
		"quotagate.requests{bucket=slow,handler=,key_source=consume,outcome=limited,plan=} 1",
		"quotagate.store.duration{op=acquire,store=custom} count=3",
		"quotagate.store.duration{op=release,store=custom} count=1",
	})
}
