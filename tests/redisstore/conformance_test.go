package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
)

// conformanceStores makes stores on be for the conformance helpers: each on
// a fresh client with an injected clock, the "conformance" keys deleted
// before and after.
func conformanceStores(be *backend) conformance.NewStoreFunc {
	return func(t testing.TB, clock func() time.Time) limitstore.Store {
		c := be.newClient(t)
		deleteKeys(t, c, "conformance")
		t.Cleanup(func() { deleteKeys(t, c, "conformance") })
		s, err := New(c, WithClock(clock), WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// TestConformance runs the shared store scenarios (differential against
// limitstore.Op.Apply, concurrency exactness, key independence, several quotas
// and plans through a Limiter) on every backend. The scenarios use fixed
// "conformance:" keys and a fake clock that starts at the same instant
// every time, so each store starts from a server with none of them left by
// an earlier run.
func TestConformance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) { conformance.RunStore(t, conformanceStores(be)) })
}

// TokenBucket 3 per second, 7 per minute and 3 000 per second,
// accepted, with their own q= and w=, exact at a steady rate over 1 000
// windows on a fake clock (WithClock), on every backend: miniredis, and
// the real standalone server and Cluster when configured.
func TestRegressionTokenBucketSteadyRateNoDrift(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) { conformance.SteadyRate(t, conformanceStores(be)) })
}
