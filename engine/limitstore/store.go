package limitstore

import (
	"context"
	"errors"
)

// ErrCircuitOpen means the store was not called: its circuit breaker (a
// guard.Store's, or a store's own) is open after the store answered nothing
// for a whole timeout or failed several calls in a row, and the policy's
// FailureMode decided. The error wraps the failure that opened it. One
// probe call every 250 ms finds out whether the store is back.
var ErrCircuitOpen = errors.New("limitstore: store not called, its circuit breaker is open")

// Store keeps rate-limit state and makes one atomic decision per call
// (store contract v2, DESIGN.md "Store contract").
//
// Take reads the States stored under the keys of op.Quotas[:op.N] (the zero
// State when absent or expired), applies op.Apply at the store's own clock
// reading (op.ApplyTo, into *res), and writes back, all as one atomic step:
//   - an admitted Op: every State, each with a time to live of its
//     QuotaResult.TTLMS;
//   - a denied Op: nothing (a denied request takes nothing from any quota);
//   - a Refund: each State whose QuotaResult.TTLMS > 0 that exists under its
//     key, keeping the key's existing expiry; a Refund never creates a key.
//
// Take writes its answer into *res, every field of it (the engine passes a
// Result it reuses, so that a few hundred bytes are not copied per
// decision). A non-nil error means the backend failed (unreachable, timed
// out, broken reply), never "denied"; the engine then applies the policy's
// FailureMode and ignores *res.
//
// Take must honour ctx's deadline and be safe for concurrent use. The
// engine passes the caller's context as it is: a store that waits on I/O
// wraps itself with guard.New for a timeout, a circuit breaker and a deny
// cache that every Limiter on it shares. It must not keep op, res or any
// Key after it returns (the engine reuses them). A store that needs a
// placement hash computes its own keyed hash of the keys (clients choose
// identities, so an unkeyed hash would let them aim collisions). It may
// describe itself to the engine with a method Describe() Info (see Info).
type Store interface {
	Take(ctx context.Context, op *Op, res *Result) error
}

// Resetter is a Store that can also look without writing and forget: it
// honours Op.Peek in Take (the Result the Op would get, nothing written)
// and implements Reset. limit.Limiter's Peek and Reset need one; on any
// other Store they return an error wrapping errors.ErrUnsupported, and the
// engine never sends it a Peek.
//
// Reset forgets the records under keys, every one of them or none, as one
// atomic step: a concurrent Take on any of the keys runs wholly before or
// wholly after it. A live State (stored and not expired) is replaced by
// the empty State of the next epoch, State{Epoch: Epoch+1}, which keeps
// the State's expiry; any other record (absent, expired, a block record)
// is deleted, or replaced so too: the zero block record is none. The
// epoch is what makes a charge taken before the Reset and given back
// after it (a Refund carrying the charge's Quota.Epoch) give nothing back
// to the identity's new usage. The engine passes the keys of one
// identity, which share one Redis Cluster hash tag ("{...}"), at most a
// few hundred of them. An absent key is no error (Reset is idempotent in
// what it forgets; each Reset of a live State moves its epoch on). As for
// Take, a non-nil error means the backend failed; the store must honour
// ctx's deadline and keep no key after it returns.
type Resetter interface {
	Store
	Reset(ctx context.Context, keys [][]byte) error
}

// Info is what a Store tells the engine about itself: a Store that has a
// method
//
//	Describe() Info
//
// is asked once, in limit.New (and With). A Store without it, and the zero
// value, are labelled "custom" and taken as not shared.
type Info struct {
	// Name is the store label of metrics ("memory", "redis"); "" means
	// "custom".
	Name string
	// Shared reports that other processes may read and write the same
	// records (a network store such as Redis: true; a per-process store such
	// as the memory store: false). On a shared store limit.New refuses the
	// default key prefix unless the caller sets one (WithKeyPrefix), so that
	// two services on one store never draw on one allowance by accident.
	Shared bool
	// Blocks reports that the store honours Op.Block: it reads and writes
	// the block record in the same atomic step as the quotas and decides
	// with Op.ApplyBlock (the memory and Redis stores do). limit.New
	// refuses Policy.BlockFor on a store without it.
	Blocks bool
}
