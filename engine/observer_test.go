package limit_test

import (
	"context"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

func TestPanickingObserverDoesNotBreakRequests(t *testing.T) {
	t.Parallel()
	for _, s := range []limitstore.Store{limittest.NewStore(nil), errStore} {
		l := limittest.MustNew(s, limit.Policy{Limit: 1, KeyFunc: func(limit.Request) (string, error) { panic("key") }}, limit.WithObserver(panicObserver{}))
		resp := check(l, context.Background(), limit.Request{})
		if resp.Denied() || !resp.Decision.Allowed {
			t.Fatalf("first request with a panicking observer: %+v, want allowed", resp.Decision)
		}
	}
}

// panicObserver panics on every event.
type panicObserver struct{}

func (panicObserver) Decision(limit.DecisionEvent)                { panic("decision") }
func (panicObserver) Issue(string, limit.Issue)                   { panic("issue") }
func (panicObserver) Refund(string, string)                       { panic("refund") }
func (panicObserver) StoreError(string, limit.FailureMode)        { panic("store error") }
func (panicObserver) StoreDuration(string, string, time.Duration) { panic("duration") }
func (panicObserver) StoreEvent(string, string)                   { panic("store event") }
