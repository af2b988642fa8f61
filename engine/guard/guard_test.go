package guard_test

import (
	"context"
	"testing"
	"testing/synctest"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The wrapper against fake stores (helpers_test.go): its Take here; the
// shared deadline and what it measures in deadline_test.go, the circuit
// breaker in breaker_test.go, the local deny cache in denycache_test.go.
// Timing runs on synctest's fake clock: every duration is exact.

// A guarded call allocates nothing per decision: the store context is
// pooled and the deadline is shared by the calls of a tick (synctest's clock
// stands still while the loop runs, so every call is in one tick; at real
// rates a tick's few allocations are shared by every call that starts
// within 1 ms). A cached denial allocates nothing either.
func TestTakeAllocationFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := guarded(t, ioStore(nil))
		l := mustNew(t, store, limit.Policy{Limit: 1_000_000_000})
		r := req("192.0.2.1:1", "/")
		w := limittest.Discard
		assertNoAllocs(t, l, func() { l.Check(context.Background(), r, w) })
		denied := mustNew(t, store, limit.Policy{Name: "denied", Limit: 1})
		denied.Check(context.Background(), r, w)
		denied.Check(context.Background(), r, w) // the store's denial: cached
		assertNoAllocs(t, denied, func() {
			if d := denied.Check(context.Background(), r, w); d.Allowed {
				t.Fatal("admitted")
			}
		})
	})
}
