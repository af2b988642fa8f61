package limitstore

import (
	"math/rand/v2"
	"testing"

	"github.com/quotagate/quotagate/engine/internal/refmodel"
)

// blockOp is an Op of one fixed window of 1 per 1000 ms with a block rule.
func blockOp(forMS, maxMS int64) Op {
	return Op{Cost: 1, N: 1, Quotas: [MaxQuotas]Quota{{Key: []byte("k"), Algorithm: FixedWindow, Limit: 1, WindowMS: 1000}},
		Block: Block{Key: []byte("b"), ForMS: forMS, MaxMS: maxMS}}
}

// TestApplyBlockSteps: a denial begins a block and reports its record; a
// request during it is denied with nothing taken nor written; a Peek
// reports the block it would begin and writes nothing; a Refund and an Op
// without a rule are Apply.
func TestApplyBlockSteps(t *testing.T) {
	op := blockOp(300, 1000)
	var sts [MaxQuotas]State
	var b BlockState
	if res := op.ApplyBlock(&sts, &b, 0); !res.Allowed || res.BlockMS != 0 || res.BlockTTLMS != 0 {
		t.Fatalf("first request: %+v", res)
	}
	peek := op
	peek.Peek = true
	view := sts
	if res := peek.ApplyBlock(&view, &b, 10); res.Allowed || !res.BlockStarted || res.BlockMS != 300 || res.BlockTTLMS != 0 || b != (BlockState{}) {
		t.Fatalf("Peek past the quota: %+v, record %+v", res, b)
	}
	res := op.ApplyBlock(&sts, &b, 10)
	if res.Allowed || !res.BlockStarted || res.BlockMS != 300 || res.BlockTTLMS != 1300 || b != (BlockState{UntilMS: 310, LastMS: 300}) {
		t.Fatalf("the request past the quota: %+v, record %+v", res, b)
	}
	// A new window: the quota admits, a block in force denies.
	before := sts
	b = BlockState{UntilMS: 1500, LastMS: 300}
	res = op.ApplyBlock(&sts, &b, 1200)
	if res.Allowed || res.BlockStarted || res.BlockMS != 300 || res.BlockTTLMS != 0 || sts != before || !res.Quotas[0].Allowed || res.Quotas[0].TTLMS != 0 {
		t.Fatalf("during a block, the quota admitting: %+v, states %+v", res, sts)
	}
	refund := op
	refund.Refund, refund.Quotas[0].Window = true, 0
	if res := refund.ApplyBlock(&sts, &b, 1200); !res.Allowed || res.BlockMS != 0 {
		t.Fatalf("a Refund: %+v", res)
	}
	none := blockOp(0, 0)
	var s2 [MaxQuotas]State
	var b2 BlockState
	none.ApplyBlock(&s2, &b2, 0)
	if res := none.ApplyBlock(&s2, &b2, 1); res.Allowed || res.BlockMS != 0 || b2 != (BlockState{}) {
		t.Fatalf("no rule: %+v", res)
	}
}

// TestApplyBlockAgainstTheBlockModel: random offences of one identity at
// random instants; every block's length and the time left on it as
// refmodel.Block says (doubling while remembered, capped, forgotten
// BlockMax after a block ends).
func TestApplyBlockAgainstTheBlockModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	for round := range 200 {
		forMS := 1 + rng.Int64N(50)
		maxMS := int64(0)
		if rng.IntN(3) > 0 {
			maxMS = forMS + rng.Int64N(400)
		}
		op := blockOp(forMS, maxMS)
		op.Quotas[0].Limit, op.Quotas[0].WindowMS = 1, 1_000_000_000 // one admission, then every request denied
		m := refmodel.NewBlock(forMS, maxMS)
		var sts [MaxQuotas]State
		var b BlockState
		now := int64(1_000)
		op.ApplyBlock(&sts, &b, now)
		for step := range 300 {
			now += rng.Int64N(3 * max(forMS, maxMS) / 2)
			left := m.Left(now)
			res := op.ApplyBlock(&sts, &b, now)
			switch {
			case left > 0:
				if res.Allowed || res.BlockStarted || res.BlockMS != left {
					t.Fatalf("round %d step %d at %d: %+v, want %d ms left on the block", round, step, now, res, left)
				}
			default:
				d := m.Offend(now)
				if res.Allowed || !res.BlockStarted || res.BlockMS != d || res.BlockTTLMS != d+maxMS {
					t.Fatalf("round %d step %d at %d (rule %d/%d): %+v, want a block of %d", round, step, now, forMS, maxMS, res, d)
				}
			}
		}
	}
}
