package redisstore_test

import (
	"testing"

	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// Policy.MaxWait's fleet target on one real Redis: 3 processes (a store on
// its own client each) x 200 callers waiting for slots of a token bucket
// of 50 per second: admitted within 1 % of 50 per second over 10 s, no two
// slots closer than the emission interval, in the order of arrival.
func TestWaitFleetOnOneRedis(t *testing.T) {
	be := standaloneBackend(t)
	prefix := testPrefix(t)
	t.Cleanup(func() { deleteKeys(t, be.newClient(t), prefix) })
	conformance.WaitFleet(t, func(t testing.TB) limitstore.Store { return newStore(t, be) }, limit.WithKeyPrefix(prefix))
}

// Policy.MaxWait's cancellation target on every backend: 100 of 200
// waiters cancelled halfway leave the state the 100 others account for.
func TestWaitCancelGivesBackExactly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) { conformance.WaitCancel(t, conformanceStores(be)) })
}
