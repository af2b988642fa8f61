package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// lateCtx is a context whose caller is slow to notice it is done: the
// first Done call reports itself on asked and then waits for hold before
// answering, as a Take's goroutine descheduled between queueing and its
// select would.
type lateCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
	hold  chan struct{}
}

func (c *lateCtx) Done() <-chan struct{} {
	first := false
	c.once.Do(func() { first = true; close(c.asked) })
	if first {
		<-c.hold
	}
	return c.Context.Done()
}

// TestRegressionGaveUpWhileQueuedNeverCharged (found by trying to break
// group commit): a Take whose context ends while it is queued, but whose
// goroutine has not yet noticed when a flight takes the queue, must not be
// sent: Store.Take promises that a Take that gave up while waiting for a
// call to share is never counted. Before the fix the flight (here the flush
// timer's, the Take having a deadline) sent its Op and Redis charged it
// after its caller had returned the context's error. Both cases: a context
// cancelled while its Take is queued, and one whose deadline had passed
// before Take was called (now refused before queueing).
func TestRegressionGaveUpWhileQueuedNeverCharged(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		for _, how := range []string{"cancelled", "expired"} {
			t.Run(how, func(t *testing.T) {
				prefix, client, s, g, r := gatedStore(t, be)
				op := oneQuota(prefix+":{late}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
				// A deadline, so that the flush timer sends the queue 1 ms
				// after the Take queued; "expired": passed before Take.
				dl := time.Now().Add(time.Minute)
				if how == "expired" {
					dl = time.Now().Add(-time.Millisecond)
				}
				parent, cancel := context.WithDeadline(context.Background(), dl)
				defer cancel()
				ctx := &lateCtx{Context: parent, asked: make(chan struct{}), hold: make(chan struct{})}
				ch := make(chan outcome, 1)
				go func() {
					res, err := s.Take(ctx, &op)
					ch <- outcome{res, err}
				}()
				var o outcome
				select {
				case o = <-ch: // returned without waiting: never queued
				case <-ctx.asked: // queued, its goroutine now slow to notice
					cancel()
					// The flush timer sends the queue: the filler queued
					// before, and the Take only if it is (wrongly) still
					// queued.
					select {
					case n := <-g.arrived:
						if n != 1 { // takeScript: the filler alone
							t.Errorf("the flush sent a call of %d Ops; want the filler's plain call (1): the Take that gave up was sent", n)
						}
						g.permits <- struct{}{}
					case <-time.After(10 * time.Second):
						t.Fatal("no flight within 10 s")
					}
					close(ctx.hold)
					o = r.wait(ch)
				case <-time.After(10 * time.Second):
					t.Fatal("the Take neither returned nor queued within 10 s")
				}
				if o.err == nil || !errors.Is(o.err, parent.Err()) {
					t.Fatalf("the Take that gave up: %+v; want %v", o, parent.Err())
				}
				r.releaseAll()
				neverSent(t, client, &op)
			})
		}
	})
}
