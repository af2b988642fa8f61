package limitstore

import "context"

// This file is the store contract of concurrency slots (limit.Concurrency):
// a slot is a lease, held by a unique token until a deadline, in a set of
// leases per identity. Taking and giving back are one atomic step each.

// Concurrency is the algorithm of concurrency slots: not a rate, so never
// in an Op (Apply knows nothing of it); its stores' operations are
// Leaser's.
const Concurrency = TokenBucket + 1

// TokenSize is the length of a lease holder's token in bytes.
const TokenSize = 16

// Leaser is a Store that also keeps concurrency slots: Acquire takes (or
// renews) the slots of one holder, Release gives them back. limit.New
// accepts a Concurrency policy only on a Store that implements it (the
// memory and Redis stores do).
//
// Acquire, as one atomic step at the store's own clock reading now: drops
// the leases of op.Key whose deadline is at or before now; then, when the
// holder op.Token already holds leases there (a renewal), moves their
// deadline to now + op.LeaseMS and admits; else, when the leases held plus
// op.Cost fit op.Limit, adds op.Cost leases of op.Token with that deadline
// and admits; else denies and writes nothing. Every write gives the key a
// time to live of at least the latest deadline it holds, and at most
// op.LeaseMS + 1 s past now.
//
// Release, as one atomic step: removes the leases of op.Token under op.Key
// and reports whether there were any. It never removes another token's
// lease, so a double release, a release of an expired lease and a release
// by another holder free nothing they should not.
//
// Errors, ctx and the keeping of op are as for Store.Take.
type Leaser interface {
	Store
	Acquire(ctx context.Context, op *LeaseOp) (LeaseResult, error)
	Release(ctx context.Context, op *LeaseOp) (released bool, err error)
}

// LeaseOp is one Acquire or Release asked of a [Leaser].
type LeaseOp struct {
	// Key is the identity's lease set key (laid out as Quota.Key, with one
	// Redis Cluster hash tag). The bytes are reused after the call returns.
	Key []byte
	// Token identifies the holder; it is unique per held request across
	// every process on the store.
	Token [TokenSize]byte
	// Cost is the number of slots the holder takes, 1..Limit.
	Cost int64
	// Limit is the number of slots the identity may hold at once, >= 1.
	Limit int64
	// LeaseMS is how long a lease lasts without renewal, in milliseconds,
	// >= 1.
	LeaseMS int64
}

// LeaseResult is a Leaser's answer to Acquire.
type LeaseResult struct {
	// Allowed reports that the holder holds its slots until NowMS+LeaseMS.
	Allowed bool
	// Held is the number of slots held under the key after the call.
	Held int64
	// NowMS is the store's clock reading used, Unix ms.
	NowMS int64
}
