package redisstore

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
)

// C-13: TokenBucket 3 per second, 7 per minute and 3 000 per second,
// accepted, with their own q= and w=, exact at a steady rate over 1 000
// windows on a fake clock (WithClock), on every backend: miniredis, and
// the real standalone server and Cluster when configured.
func TestRegressionC13TokenBucketSteadyRateNoDrift(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		conformance.SteadyRate(t, func(t testing.TB, clock func() time.Time) limit.Store {
			c := be.newClient(t)
			deleteKeys(t, c, "conformance")
			t.Cleanup(func() { deleteKeys(t, c, "conformance") })
			s, err := New(c, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}
