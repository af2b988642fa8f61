package limitstore

// This file holds the block rule of an Op (limit.Policy.BlockFor and
// BlockMax): a limited request starts a block, and the identity stays
// limited until it ends, whatever its quotas say. The store decides it in
// the same atomic step as the quotas, from one more record under the
// identity's hash tag.

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
}

// BlockState is the stored block record of one identity; the zero value
// is none (no block in force, no offence remembered).
type BlockState struct {
	// UntilMS is the instant the last block ends, Unix ms: the identity is
	// blocked while now < UntilMS.
	UntilMS int64
	// LastMS is the last block's length, ms.
	LastMS int64
}

// Remembered reports whether b's offence still counts at now under rule
// blk: it does while now < UntilMS + MaxMS (with MaxMS 0, while the block
// lasts).
func (b *BlockState) Remembered(blk *Block, now int64) bool {
	return b.LastMS > 0 && now < b.UntilMS+max(blk.MaxMS, 0)
}

// ApplyBlock is Apply with op's block rule (Op.Block) and the identity's
// block record *b, read by the store in the same atomic step as the quota
// States (the zero BlockState when absent or expired). Without a rule
// (ForMS 0), and for a Refund, it is Apply and leaves *b alone.
//
// While a block is in force (now < b.UntilMS) the Op is denied and nothing
// is taken nor written: the Result carries every quota's answer with
// nothing taken, as a denial's (Allowed and RetryAfterMS say whether the
// quota alone would admit the cost; no wait; every TTLMS 0), and BlockMS is
// the time left on the block. Otherwise the quotas decide, as
// Apply; when they deny, a block begins now: ForMS long, or for a repeat
// offence (b remembered, see BlockState.Remembered) twice the last one,
// at least ForMS and at most MaxMS. *b is then the new record, BlockMS its
// length, BlockStarted true, and BlockTTLMS (ms: the block and MaxMS after
// it) the record's time to live, with which the store writes it. A Peek
// reports the same and writes nothing: *b left alone, BlockTTLMS 0.
func (op *Op) ApplyBlock(states *[MaxQuotas]State, b *BlockState, now int64) Result {
	blk := &op.Block
	if blk.ForMS <= 0 || op.Refund {
		return op.Apply(states, now)
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
		return res
	}
	d := blk.ForMS
	if blk.MaxMS > 0 && b.Remembered(blk, now) {
		d = min(max(2*b.LastMS, blk.ForMS), blk.MaxMS)
	}
	res.BlockMS, res.BlockStarted = d, true
	if !op.Peek {
		*b = BlockState{UntilMS: now + d, LastMS: d}
		res.BlockTTLMS = d + max(blk.MaxMS, 0)
	}
	return res
}
