package memstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// TestBlocksAgainstTheReferenceModels: limittest.CheckBlocks on the memory
// store (random sequences of ConsumeN, Peek and Reset with blocks, several
// quotas and plans, a fake clock), field by field with the brute-force
// models.
func TestBlocksAgainstTheReferenceModels(t *testing.T) {
	const start = 1_767_225_600_000
	c := limittest.NewClock(time.UnixMilli(start))
	s, err := memstore.New(memstore.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	limittest.CheckBlocks(t, s, limittest.BlockRun{Start: start, Set: func(ms int64) int64 { c.Set(time.UnixMilli(ms)); return ms }, Seed: 2})
}

// TestUnsettledChargesHoldOffBlocks: limittest.CheckUnsettledCharges on
// the memory store (a fake clock): successes in flight, concurrent ones
// included, never begin a block; failures that spend the quota do; a lost
// charge counts once its lease ends.
func TestUnsettledChargesHoldOffBlocks(t *testing.T) {
	const start = 1_767_225_600_000
	c := limittest.NewClock(time.UnixMilli(start))
	s, err := memstore.New(memstore.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	limittest.CheckUnsettledCharges(t, s, limittest.BlockRun{Start: start, Set: func(ms int64) int64 { c.Set(time.UnixMilli(ms)); return ms }})
}
