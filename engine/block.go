package limit

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// maxBlock is the longest Policy.BlockFor and BlockMax: a block record
// lives for the block and BlockMax after it, at most twice maxBlock (360
// days), within the stores' bound on a record's life (2^35 ms, 397 days)
// and the engine's on a delay.
const maxBlock = 180 * 24 * time.Hour

// blockSegment stands in a block record's key where a quota's state
// signature stands in a quota's: "<prefix>:{<tag>}:<bucket>:block:<identity>".
// No state signature (it starts with a digit) nor plan state ("<plan>=...")
// spells it.
const blockSegment = "block"

// pendingSegment stands there in the key of the identity's unsettled
// charges (a policy that blocks and counts by status, CountStatus):
// "<prefix>:{<tag>}:<bucket>:pending:<identity>".
const pendingSegment = "pending"

// pendingLeaseMS is how long the store keeps a charge of a policy that
// blocks and counts by status unsettled without its Finish: Policy.Lease,
// DefaultLease when 0; 0 for a policy without both CountStatus and
// BlockFor (no charge is kept). It is the length of the lease periods of
// the identity's record of unsettled charges, which every policy of one
// Name shares (MaxWait apart): one length per record.
func (p *Policy) pendingLeaseMS() int64 {
	if p.BlockFor <= 0 || p.CountStatus == nil || p.Algorithm == Concurrency {
		return 0
	}
	return p.leaseMS()
}

// checkBlock validates BlockFor and BlockMax.
func (p *Policy) checkBlock() error {
	switch {
	case p.BlockFor < 0:
		return fmt.Errorf("%w: BlockFor %v is negative (0: no blocks)", ErrInvalidPolicy, p.BlockFor)
	case p.BlockMax < 0:
		return fmt.Errorf("%w: BlockMax %v is negative (0: every block lasts BlockFor)", ErrInvalidPolicy, p.BlockMax)
	case p.BlockMax > 0 && p.BlockFor == 0:
		return fmt.Errorf("%w: BlockMax is set but BlockFor is 0: BlockMax bounds the blocks BlockFor begins", ErrInvalidPolicy)
	case p.BlockFor%time.Millisecond != 0:
		return fmt.Errorf("%w: BlockFor %v is not a whole number of milliseconds", ErrInvalidPolicy, p.BlockFor)
	case p.BlockMax%time.Millisecond != 0:
		return fmt.Errorf("%w: BlockMax %v is not a whole number of milliseconds", ErrInvalidPolicy, p.BlockMax)
	case p.BlockFor > maxBlock:
		return fmt.Errorf("%w: BlockFor %v exceeds the maximum %v (the stores keep a block record for the block and BlockMax after it, within their time-to-live bound)", ErrInvalidPolicy, p.BlockFor, maxBlock)
	case p.BlockMax > maxBlock:
		return fmt.Errorf("%w: BlockMax %v exceeds the maximum %v (the stores keep a block record for the block and BlockMax after it, within their time-to-live bound)", ErrInvalidPolicy, p.BlockMax, maxBlock)
	case p.BlockMax > 0 && p.BlockMax < p.BlockFor:
		return fmt.Errorf("%w: BlockMax %v is below BlockFor %v: a repeat offence's block doubles from BlockFor up to BlockMax", ErrInvalidPolicy, p.BlockMax, p.BlockFor)
	}
	if p.BlockFor <= 0 || p.CountStatus == nil {
		return nil
	}
	// Lease bounds how long an unfinished charge holds off a block.
	switch {
	case p.Lease < 0:
		return fmt.Errorf("%w: Lease %v is negative (0 means the default %v)", ErrInvalidPolicy, p.Lease, DefaultLease)
	case p.Lease > maxLease:
		return fmt.Errorf("%w: Lease %v is over the maximum %v (with BlockFor and CountStatus, how long a charge waiting for its status holds off a block)", ErrInvalidPolicy, p.Lease, maxLease)
	case p.Lease%time.Millisecond != 0:
		return fmt.Errorf("%w: Lease %v is not a whole number of milliseconds (the stores' resolution)", ErrInvalidPolicy, p.Lease)
	}
	return nil
}

// checkBlockStore refuses BlockFor on a store that does not say it honours
// blocks (limitstore.Info.Blocks): it would ignore Op.Block and never block.
func checkBlockStore(s limitstore.Store, p *Policy) error {
	if p.BlockFor <= 0 {
		return nil
	}
	if d, ok := s.(describer); ok && d.Describe().Blocks {
		return nil
	}
	return fmt.Errorf("%w: BlockFor needs a store that decides blocks (limitstore.Info.Blocks: the memory and Redis stores do); this one would never block", ErrInvalidPolicy)
}

// blockRule fills op.Block for id's request on bucket: the policy's rule
// and the key of id's block record, spelled from op's first quota key
// (whose identity part and hash tag it shares) into sc.key, and for a
// policy that counts by status the lease and key of id's unsettled
// charges (see Finish), spelled so too. The fallback identity is never
// blocked: it is every client without an identity.
func (l *Limiter) blockRule(sc *scratch, bucket *bucketRef, id *who, set *quotaSet, op *limitstore.Op) {
	if l.policy.BlockFor <= 0 || id.src == KeySourceFallback {
		op.Block = limitstore.Block{}
		return
	}
	k0 := op.Quotas[0].Key
	head := len(l.keys.prefix) + len(":{00000000}:") + len(bucket.name) + 1
	idAt := head + len(set.q[0].state) + 1
	op.Block = limitstore.Block{Key: sc.recordKey(k0, head, idAt, blockSegment),
		ForMS: l.policy.BlockFor.Milliseconds(), MaxMS: l.policy.BlockMax.Milliseconds()}
	if l.leaseMS > 0 {
		op.Block.LeaseMS, op.Block.PendingKey = l.leaseMS, sc.recordKey(k0, head, idAt, pendingSegment)
	}
}

// recordKey appends to sc.key, and returns, the key of one of an
// identity's records: quota key k0 with segment in place of its state
// signature (k0[head:idAt-1]).
func (sc *scratch) recordKey(k0 []byte, head, idAt int, segment string) []byte {
	start := len(sc.key)
	sc.key = append(sc.key, k0[:head]...)
	sc.key = append(sc.key, segment...)
	sc.key = append(sc.key, ':')
	sc.key = append(sc.key, k0[idAt:]...)
	return sc.key[start:len(sc.key):len(sc.key)]
}

// settles reports whether the charges of id are kept unsettled in the
// store until their Finish (a policy that blocks and counts by status:
// see Finish).
func (l *Limiter) settles(id *who) bool {
	return l.leaseMS > 0 && id.src != KeySourceFallback
}

// blockKey appends the key of id's block record to keys, when the policy
// blocks (what Reset forgets besides the quotas).
func (l *Limiter) blockKey(keys [][]byte, id *who) [][]byte {
	if l.policy.BlockFor <= 0 || id.src == KeySourceFallback {
		return keys
	}
	var sc scratch
	set := &l.res.plans[0].sets[0]
	sc.key = l.keys.appendKeys(nil, &l.shared, id, set, &sc.op)
	l.blockRule(&sc, &l.shared, id, set, &sc.op)
	return append(keys, sc.op.Block.Key)
}

// fillBlock writes the block of a store's Result into d: a request a block
// denies is Blocked, and its RetryAfter is at least the time left on the
// block.
func (d *Decision) fillBlock(res *limitstore.Result) {
	d.Blocked, d.blockStarted = false, false
	if res.Allowed || res.BlockMS <= 0 {
		return
	}
	d.Blocked, d.blockStarted = true, res.BlockStarted
	// Nothing is left to a blocked identity until the block ends, whatever
	// its quota holds: the RateLimit fields say so too.
	d.Remaining = 0
	b := time.Duration(min(res.BlockMS, maxDelayMS)) * time.Millisecond
	d.RetryAfter, d.ResetAfter = max(d.RetryAfter, b), max(d.ResetAfter, b)
	d.ResetAt = time.UnixMilli(res.NowMS + d.ResetAfter.Milliseconds())
}

// quotaRetryMS is the latest RetryAfterMS of the quotas of res that deny,
// the block aside.
func quotaRetryMS(res *limitstore.Result) int64 {
	var ms int64
	for i := range min(res.N, limitstore.MaxQuotas) {
		if q := &res.Quotas[i]; !q.Allowed {
			ms = max(ms, q.RetryAfterMS)
		}
	}
	return ms
}

// logBlock logs the start of a block (the store reports it once per
// identity and block), at most once per storeLogEvery per Limiter.
func (l *Limiter) logBlock(d *Decision) {
	if !d.blockStarted || !l.blockLog.allow(l.cfg.rep.clock(), storeLogEvery) {
		return
	}
	l.cfg.rep.logger.Info("quotagate: an identity is blocked (Policy.BlockFor; logged at most once per 10s per limiter; every blocked request is counted)",
		slog.String("bucket", d.Bucket), slog.String("identity", sanitize(d.Identity())), slog.String("plan", d.Plan),
		slog.Duration("block", d.RetryAfter), slog.Bool("shadow", l.policy.Shadow))
}
