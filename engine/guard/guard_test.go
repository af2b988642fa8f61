package guard_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
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

// Wrapping a store that keeps Claims keeps its check: a second unnamed
// Limiter with the same numbers is refused through the wrapper, and
// through the bare store too (one record).
func TestWrapperKeepsTheStoresClaims(t *testing.T) {
	inner := &struct {
		*limittest.Store
		limitstore.Claims
	}{Store: limittest.NewStore(nil)}
	g := guarded(t, inner)
	p := limit.Policy{Limit: 5}
	mustNew(t, g, p)
	if _, err := limit.New(g, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("second unnamed Limiter through the wrapper: %v, want the refusal", err)
	}
	if _, err := limit.New(inner, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("second unnamed Limiter on the bare store: %v, want the refusal", err)
	}
	mustNew(t, guarded(t, limittest.NewStore(nil)), p) // no Claims inside: not checked
	mustNew(t, guarded(t, limittest.NewStore(nil)), p)
}
