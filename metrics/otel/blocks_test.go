package otellimit_test

import (
	"context"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// TestBlockedRequestsThroughTheEngine: quotagate.blocked_requests counts the
// requests a block limited (the one that began it and those during it),
// apart from the limited ones of quotagate.requests, which count them too.
func TestBlockedRequestsThroughTheEngine(t *testing.T) {
	obs, reader := newObserver(t)
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
	equal(t, points(t, reader), []string{
		"quotagate.blocked_requests{bucket=otp,plan=} 2",
		"quotagate.requests{bucket=otp,handler=,key_source=consume,outcome=allowed,plan=} 1",
		"quotagate.requests{bucket=otp,handler=,key_source=consume,outcome=degraded,plan=} 0",
		"quotagate.requests{bucket=otp,handler=,key_source=consume,outcome=limited,plan=} 2",
		"quotagate.store.duration{op=take,store=custom} count=3",
	})
}
