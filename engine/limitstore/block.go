package limitstore

// This file holds the block rule of an Op (limit.Policy.BlockFor and
// BlockMax): a limited request starts a block, and the identity stays
// limited until it ends, whatever its quotas say. The store decides it in
// the same atomic step as the quotas, from one more record under the
// identity's hash tag, and, for a policy that counts by status
// (limit.Policy.CountStatus), from a second one: the identity's charges
// still unsettled (taken, their status not yet known), which hold off a
// block.

// Block is an Op's block rule; the zero value is none.
type Block struct {
	// Key is the store key of the identity's block record. It shares the
	// hash tag of the Op's quota keys (one Redis Cluster slot, one memory
	// store shard), and like them its bytes are reused after Take returns.
	Key []byte
	// ForMS is the length of a first block in milliseconds; 0: the Op has
	// no block rule and Key is unused.
	ForMS int64
	// MaxMS, when > 0, makes a repeat offence's block twice the previous
	// one, at most MaxMS (>= ForMS). An offence is remembered from the
	// instant its block begins until MaxMS after the block ends; a block
	// that begins while the previous offence is remembered is a repeat. 0:
	// every block lasts ForMS and the record dies when its block ends.
	MaxMS int64
	// LeaseMS, when > 0, makes the store keep the identity's unsettled
	// charges under PendingKey (a policy that counts by status: a charge
	// taken now may be given back when its request ends): an admitted Op
	// adds one charge, a Refund settles one (giving back Cost, which may
	// be 0: a counted charge, settled with nothing given back), and a
	// denial begins a block only while no charge is unsettled (see
	// ApplyBlock). A charge counts in the lease period of its admission
	// (periods of LeaseMS from the Unix epoch, see BlockState.Lease) and
	// is taken as settled once the period after that one ends, at least
	// LeaseMS and less than 2*LeaseMS after it was taken, whether or not
	// its Refund came (a crashed process, a handler running longer). 0:
	// no charge is tracked, PendingKey and Lease are unused.
	LeaseMS int64
	// PendingKey is the store key of the identity's unsettled charges
	// (LeaseMS > 0), a record of its own beside Key, with the same hash
	// tag; a Reset does not forget it (the charges are still in flight).
	// Its bytes are reused after Take returns.
	PendingKey []byte
	// Lease is read by a Refund only, as returned in Result.Lease: the
	// lease period the settled charge was counted in.
	Lease int64
}

// BlockState is the stored block record of one identity; the zero value
// is none (no block in force, no offence remembered).
type BlockState struct {
	// UntilMS is the instant the last block ends, Unix ms: the identity is
	// blocked while now < UntilMS.
	UntilMS int64
	// LastMS is the last block's length, ms.
	LastMS int64

	// The unsettled charges (Block.LeaseMS > 0), kept under
	// Block.PendingKey: Pending charges counted in lease period Lease
	// (now/LeaseMS, floored), PendingPrev in period Lease-1.
	Lease, Pending, PendingPrev int64
}

// Unsettled is the number of charges of b still unsettled at now under
// rule blk: those of the lease period of now and of the one before (all
// of them while the stored period is ahead of now's: a clock stepped
// back). 0 without a lease (LeaseMS 0).
func (b *BlockState) Unsettled(blk *Block, now int64) int64 {
	if blk.LeaseMS <= 0 {
		return 0
	}
	switch cur := now / blk.LeaseMS; {
	case b.Lease >= cur:
		return max(b.Pending, 0) + max(b.PendingPrev, 0)
	case b.Lease == cur-1:
		return max(b.Pending, 0)
	}
	return 0
}

// charge adds one unsettled charge at now and returns the lease period it
// counts in: now's, or the stored one when it is ahead (a clock stepped
// back), the older periods shifted out.
func (b *BlockState) charge(blk *Block, now int64) int64 {
	switch cur := now / blk.LeaseMS; {
	case b.Lease >= cur:
		b.Pending = max(b.Pending, 0) + 1
	case b.Lease == cur-1:
		b.Lease, b.Pending, b.PendingPrev = cur, 1, max(b.Pending, 0)
	default:
		b.Lease, b.Pending, b.PendingPrev = cur, 1, 0
	}
	return b.Lease
}

// settle settles one charge counted in lease period lease and reports
// whether b changed: nothing when that period's count is gone (shifted
// out, or none left).
func (b *BlockState) settle(lease int64) bool {
	switch {
	case lease == b.Lease && b.Pending > 0:
		b.Pending--
	case lease == b.Lease-1 && b.PendingPrev > 0:
		b.PendingPrev--
	default:
		return false
	}
	return true
}

// PendingTTL is the time to live, from now, of b's unsettled charges
// under rule blk: until the end of the period after b.Lease.
func (b *BlockState) PendingTTL(blk *Block, now int64) int64 {
	return (b.Lease+2)*blk.LeaseMS - now
}

// Remembered reports whether b's offence still counts at now under rule
// blk: it does while now < UntilMS + MaxMS (with MaxMS 0, while the block
// lasts).
func (b *BlockState) Remembered(blk *Block, now int64) bool {
	return b.LastMS > 0 && now < b.UntilMS+max(blk.MaxMS, 0)
}

// ApplyBlock is Apply with op's block rule (Op.Block) and the identity's
// block record *b, read by the store in the same atomic step as the quota
// States (the zero BlockState when absent or expired; with a lease,
// Block.LeaseMS > 0, its Lease and Pending fields read from
// Block.PendingKey, zero when that is absent or expired). Without a rule
// (ForMS 0) it is Apply and leaves *b alone, and so it is for a Refund
// without a lease.
//
// While a block is in force (now < b.UntilMS) the Op is denied and nothing
// is taken nor written: the Result carries every quota's answer with
// nothing taken, as a denial's (Allowed and RetryAfterMS say whether the
// quota alone would admit the cost; no wait; every TTLMS 0), and BlockMS is
// the time left on the block. Otherwise the quotas decide, as Apply.
//
// When they admit and the rule has a lease, the Op's charge is added to
// *b's unsettled ones (see BlockState.Unsettled): Result.Lease is the
// lease period it counts in, to be passed back in Block.Lease by the
// Refund that settles it, and PendingTTLMS the time to live with which
// the store writes Block.PendingKey (until the end of the period after
// it).
//
// When they deny and no charge is unsettled, a block begins now: ForMS
// long, or for a repeat offence (b remembered, see
// BlockState.Remembered) twice the last one, at least ForMS and at most
// MaxMS. *b is then the new record, BlockMS its length, BlockStarted true,
// and BlockTTLMS (ms: the block and MaxMS after it) the record's time to
// live, with which the store writes Block.Key. While a charge is
// unsettled (a request of the identity still waiting for its status) a
// denial begins no block: the quota it finds spent may be spent by
// charges the policy will give back (CountStatus), and a block follows
// the counted requests only.
//
// A Refund with a lease is Apply (the quotas given back Cost) and settles
// one charge of period Block.Lease; PendingTTLMS is then > 0 when *b
// changed, and the store writes Block.PendingKey keeping its expiry (a
// Refund never creates it). A Peek reports what the Op taken would and
// writes nothing: *b left alone, BlockTTLMS and PendingTTLMS 0.
func (op *Op) ApplyBlock(states *[MaxQuotas]State, b *BlockState, now int64) Result {
	blk := &op.Block
	lease := blk.LeaseMS > 0
	if blk.ForMS <= 0 || op.Refund && !lease {
		return op.Apply(states, now)
	}
	if op.Refund {
		res := op.Apply(states, now)
		if b.settle(blk.Lease) {
			res.PendingTTLMS = max(b.PendingTTL(blk, now), 1)
		}
		return res
	}
	if b.UntilMS > now {
		// Every quota's answer with nothing taken, as for any denial, on
		// copies: a block writes nothing (not even a state the clock has
		// fallen behind).
		n := min(max(op.N, 0), MaxQuotas)
		res := Result{NowMS: now, N: n, BlockMS: b.UntilMS - now}
		for i := range n {
			view := states[i]
			op.Quotas[i].decide(&res.Quotas[i], &view, op.Cost, 0, now, probe)
			res.Quotas[i].TTLMS, res.Quotas[i].Epoch = 0, states[i].Epoch
		}
		return res
	}
	res := op.Apply(states, now)
	if res.Allowed {
		if lease && !op.Peek {
			res.Lease = b.charge(blk, now)
			res.PendingTTLMS = b.PendingTTL(blk, now)
		}
		return res
	}
	if b.Unsettled(blk, now) > 0 {
		return res
	}
	d := blk.ForMS
	if blk.MaxMS > 0 && b.Remembered(blk, now) {
		d = min(max(2*b.LastMS, blk.ForMS), blk.MaxMS)
	}
	res.BlockMS, res.BlockStarted = d, true
	if !op.Peek {
		b.UntilMS, b.LastMS = now+d, d
		res.BlockTTLMS = d + max(blk.MaxMS, 0)
	}
	return res
}
