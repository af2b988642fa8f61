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

// TestApplyBlockUnsettledCharges: with a lease (LeaseMS 100), an admitted
// Op adds a charge in its lease period (Result.Lease, PendingTTLMS to the
// end of the next period), a denial while one is unsettled begins no
// block, a Refund settles the charge of the period it names (and only
// that), a charge counts until the period after its own ends, a clock
// stepped back counts in the stored period, and a Peek charges nothing.
func TestApplyBlockUnsettledCharges(t *testing.T) {
	op := blockOp(300, 0)
	op.Quotas[0].Limit = 2
	op.Block.LeaseMS, op.Block.PendingKey = 100, []byte("p")
	var sts [MaxQuotas]State
	var b BlockState
	res := op.ApplyBlock(&sts, &b, 1050)
	if !res.Allowed || res.Lease != 10 || res.PendingTTLMS != 150 || b.Lease != 10 || b.Pending != 1 || b.PendingPrev != 0 {
		t.Fatalf("first charge at 1050: %+v, record %+v", res, b)
	}
	res = op.ApplyBlock(&sts, &b, 1120) // the next period: the first charge shifts
	if !res.Allowed || res.Lease != 11 || res.PendingTTLMS != 180 || b != (BlockState{Lease: 11, Pending: 1, PendingPrev: 1}) {
		t.Fatalf("second charge at 1120: %+v, record %+v", res, b)
	}
	peek := op
	peek.Peek = true
	view := sts
	if res := peek.ApplyBlock(&view, &b, 1130); res.Allowed || res.BlockMS != 0 || res.PendingTTLMS != 0 || b.Pending != 1 {
		t.Fatalf("Peek past the quota, charges unsettled: %+v, record %+v: want no block", res, b)
	}
	if res := op.ApplyBlock(&sts, &b, 1130); res.Allowed || res.BlockMS != 0 || res.BlockStarted || res.BlockTTLMS != 0 || res.PendingTTLMS != 0 {
		t.Fatalf("a denial with 2 charges unsettled: %+v: want no block, nothing written", res)
	}
	refund := op
	refund.Refund, refund.Cost, refund.Quotas[0].Window, refund.Block.Lease = true, 0, 1, 10
	if res := refund.ApplyBlock(&sts, &b, 1140); !res.Allowed || res.PendingTTLMS <= 0 || b != (BlockState{Lease: 11, Pending: 1}) || sts[0].Count != 2 {
		t.Fatalf("a counted charge of period 10 settled: %+v, record %+v, states %+v", res, b, sts)
	}
	if res := refund.ApplyBlock(&sts, &b, 1140); res.PendingTTLMS != 0 || b != (BlockState{Lease: 11, Pending: 1}) {
		t.Fatalf("a second settle of period 10: %+v, record %+v: want nothing", res, b)
	}
	if n := b.Unsettled(&op.Block, 1299); n != 1 {
		t.Fatalf("unsettled at 1299: %d, want 1 (period 11's charge counts through period 12)", n)
	}
	if n := b.Unsettled(&op.Block, 1300); n != 0 {
		t.Fatalf("unsettled at 1300: %d, want 0", n)
	}
	res = op.ApplyBlock(&sts, &b, 1300) // the quota still spent (window 1: 1000..1999): a block
	if res.Allowed || !res.BlockStarted || res.BlockMS != 300 || res.BlockTTLMS != 300 || b.UntilMS != 1600 || b.Pending != 1 {
		t.Fatalf("a denial once the charge's lease ended: %+v, record %+v: want a block, the charges kept", res, b)
	}
	// A clock stepped back counts in the stored period.
	b = BlockState{Lease: 50, Pending: 2}
	sts = [MaxQuotas]State{}
	if res := op.ApplyBlock(&sts, &b, 4010); !res.Allowed || res.Lease != 50 || b != (BlockState{Lease: 50, Pending: 3}) || res.PendingTTLMS != 5200-4010 {
		t.Fatalf("a charge at 4010 with period 50 stored: %+v, record %+v", res, b)
	}
	// A Refund without a lease leaves the record alone.
	plain := op
	plain.Refund, plain.Block.LeaseMS = true, 0
	if res := plain.ApplyBlock(&sts, &b, 4020); res.PendingTTLMS != 0 || b.Pending != 3 {
		t.Fatalf("a Refund without a lease: %+v, record %+v", res, b)
	}
}
