package redisstore

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
)

// TestConformance runs the shared store scenarios (differential against
// limit.Op.Apply, concurrency exactness, key independence) on every backend.
// The scenarios use fixed "conformance:" keys and a fake clock that starts
// at the same instant every time, so each store starts from a server with
// none of them left by an earlier run.
func TestConformance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		conformance.RunStore(t, func(t testing.TB, clock func() time.Time) limit.Store {
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
