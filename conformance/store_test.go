package conformance_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The reference store of limittest passes the store suite: the suite's model
// and the reference agree, so a store that fails it differs from the
// engine's math, not from a test double.
func TestReferenceStore(t *testing.T) {
	conformance.RunStore(t, func(_ testing.TB, clock func() time.Time) limitstore.Store { return limittest.NewStore(clock) })
}
