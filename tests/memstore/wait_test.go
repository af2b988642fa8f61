package memstore_test

import (
	"testing"

	"github.com/quotagate/quotagate/conformance"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// Policy.MaxWait's fleet target on the memory store: 3 Limiters on one
// store x 200 callers waiting for slots of a token bucket of 50 per
// second: admitted within 1 % of 50 per second over 10 s, no two slots
// closer than the emission interval, in the order of arrival. The store
// keeps its default clock, monotonic like the engine's waits: on the wall
// clock a step during the run would move every later slot against the
// deadlines it is checked with.
func TestWaitFleet(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	conformance.WaitFleet(t, func(testing.TB) limitstore.Store { return s })
}

// Policy.MaxWait's cancellation target: 100 of 200 waiters cancelled
// halfway leave the state the 100 others account for.
func TestWaitCancelGivesBackExactly(t *testing.T) { conformance.WaitCancel(t, conformanceStore) }
