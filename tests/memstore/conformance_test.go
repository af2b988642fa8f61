package memstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// conformanceStore is a memory store on clock, for the conformance helpers.
func conformanceStore(t testing.TB, clock func() time.Time) limitstore.Store {
	s, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) { conformance.RunStore(t, conformanceStore) }

// TokenBucket 3 per second, 7 per minute and 3 000 per second,
// accepted, with their own q= and w=, exact at a steady rate over 1 000
// windows on a fake clock.
func TestRegressionTokenBucketSteadyRateNoDrift(t *testing.T) {
	conformance.SteadyRate(t, conformanceStore)
}
