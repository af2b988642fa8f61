package limittest_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/limittest"
)

// TestBlocksOnTheReferenceStore: CheckBlocks on the reference Store.
func TestBlocksOnTheReferenceStore(t *testing.T) {
	c := limittest.NewClock(time.UnixMilli(1_767_225_600_000))
	s := limittest.NewStore(c.Now)
	limittest.CheckBlocks(t, s, limittest.BlockRun{Start: 1_767_225_600_000, Set: func(ms int64) int64 { c.Set(time.UnixMilli(ms)); return ms }, Seed: 1})
}

// TestUnsettledChargesOnTheReferenceStore: CheckUnsettledCharges on the
// reference Store: successes in flight never block, failures do.
func TestUnsettledChargesOnTheReferenceStore(t *testing.T) {
	c := limittest.NewClock(time.UnixMilli(1_767_225_600_000))
	s := limittest.NewStore(c.Now)
	limittest.CheckUnsettledCharges(t, s, limittest.BlockRun{Start: 1_767_225_600_000, Set: func(ms int64) int64 { c.Set(time.UnixMilli(ms)); return ms }})
}
