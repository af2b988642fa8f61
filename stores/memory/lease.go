package memstore

import (
	"context"
	"sync"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// This file keeps the concurrency slots of limit.Concurrency policies
// (limitstore.Leaser): per identity a small set of leases, each a holder's
// token, its slot count and its deadline, under the lock of one of 64 lease
// shards (the shard of the key's hash tag, as for Take). Sets are found by
// the key's keyed 64-bit hash, as the rate entries are. A set lives while it
// holds a lease: a release that empties it, a decision that finds it all
// expired, or the sweep (each Acquire looks at two other sets of its
// shard, every 16th two of another shard too) removes it, and emptied sets are kept for reuse, so that taking
// and giving back a slot allocates nothing once a shard has served its
// peak of identities. Leases are not bounded by WithMaxKeys: they are
// bounded by the requests in flight (each set holds at most Limit slots,
// and a lease dies at its deadline).

// leaseShard is one shard of the lease sets.
type leaseShard struct {
	mu    sync.Mutex
	m     map[uint64]*leaseSet
	free  []*leaseSet // emptied sets, for reuse
	ticks uint64      // Acquires in this shard: every crossEvery-th sweeps another
}

// leaseSet is the leases of one identity.
type leaseSet struct {
	ents []leaseEnt
}

// leaseEnt is one holder's lease.
type leaseEnt struct {
	tok      [limitstore.TokenSize]byte
	n        int64 // slots
	deadline int64 // Unix ms; the lease counts while deadline > now
}

// maxFreeSets bounds the emptied sets a shard keeps for reuse.
const maxFreeSets = 64

// sweepSets is how many other sets of its shard an Acquire looks at; every
// crossEvery-th Acquire of a shard also looks at as many of another shard,
// the next in turn (unless its lock is busy), so that a quiet shard's
// expired sets go too.
const sweepSets = 2

var _ limitstore.Leaser = (*Store)(nil)

// Acquire implements limitstore.Leaser: one atomic step under the lease
// shard's lock. It never fails and never blocks on I/O.
func (s *Store) Acquire(_ context.Context, op *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	now := s.nowMS()
	id := s.keyID(op.Key)
	i := s.shardOf(hashTag(op.Key))
	sh := &s.leases[i]
	sh.mu.Lock()
	res := s.acquire(sh, id, op, now)
	sh.ticks++
	cross := -1
	if sh.ticks%crossEvery == 0 {
		cross = (i + int(sh.ticks/crossEvery)) & (shardCount - 1)
	}
	sh.mu.Unlock()
	if o := &s.leases[max(cross, 0)]; cross >= 0 && cross != i && o.mu.TryLock() {
		o.sweep(now, 0)
		o.mu.Unlock()
	}
	return res, nil
}

// acquire is Acquire under the lock of id's shard sh.
func (s *Store) acquire(sh *leaseShard, id uint64, op *limitstore.LeaseOp, now int64) limitstore.LeaseResult {
	res := limitstore.LeaseResult{NowMS: now}
	set := sh.m[id]
	if set != nil {
		res.Held = set.prune(now)
		if i := set.find(&op.Token); i >= 0 {
			set.ents[i].deadline = now + op.LeaseMS
			res.Allowed = true
			sh.sweep(now, id)
			return res
		}
	}
	if op.Cost < 1 || res.Held+op.Cost > op.Limit {
		if set != nil && len(set.ents) == 0 {
			sh.drop(id, set)
		}
		return res
	}
	if set == nil {
		set = sh.newSet()
		if sh.m == nil {
			sh.m = make(map[uint64]*leaseSet)
		}
		sh.m[id] = set
	}
	set.ents = append(set.ents, leaseEnt{tok: op.Token, n: op.Cost, deadline: now + op.LeaseMS})
	res.Allowed, res.Held = true, res.Held+op.Cost
	sh.sweep(now, id)
	return res
}

// Release implements limitstore.Leaser: it removes op.Token's lease, and
// nothing else, under the lease shard's lock.
func (s *Store) Release(_ context.Context, op *limitstore.LeaseOp) (bool, error) {
	id := s.keyID(op.Key)
	sh := &s.leases[s.shardOf(hashTag(op.Key))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.m[id]
	if set == nil {
		return false, nil
	}
	i := set.find(&op.Token)
	if i < 0 {
		return false, nil
	}
	// A lease past its deadline no longer holds a slot: removing it frees
	// nothing (it was free already), and reports false.
	live := set.ents[i].deadline > s.nowMS()
	last := len(set.ents) - 1
	set.ents[i] = set.ents[last]
	set.ents = set.ents[:last]
	if last == 0 {
		sh.drop(id, set)
	}
	return live, nil
}

// Leases returns the number of lease slots held, expired ones not yet
// removed included, and the number of lease sets (identities) kept.
func (s *Store) Leases() (slots int64, sets int) {
	for i := range s.leases {
		sh := &s.leases[i]
		sh.mu.Lock()
		for _, set := range sh.m {
			for _, e := range set.ents {
				slots += e.n
			}
		}
		sets += len(sh.m)
		sh.mu.Unlock()
	}
	return slots, sets
}

// prune removes the leases whose deadline is at or before now and returns
// the slots the others hold.
func (set *leaseSet) prune(now int64) (held int64) {
	ents := set.ents[:0]
	for _, e := range set.ents {
		if e.deadline > now {
			ents = append(ents, e)
			held += e.n
		}
	}
	clear(set.ents[len(ents):])
	set.ents = ents
	return held
}

// find returns the index of tok's lease, or -1.
func (set *leaseSet) find(tok *[limitstore.TokenSize]byte) int {
	for i := range set.ents {
		if set.ents[i].tok == *tok {
			return i
		}
	}
	return -1
}

// newSet returns an empty set, reused when one is free.
func (sh *leaseShard) newSet() *leaseSet {
	if n := len(sh.free); n > 0 {
		set := sh.free[n-1]
		sh.free[n-1] = nil
		sh.free = sh.free[:n-1]
		return set
	}
	return &leaseSet{}
}

// drop removes the empty set of id, keeping it for reuse.
func (sh *leaseShard) drop(id uint64, set *leaseSet) {
	delete(sh.m, id)
	set.ents = set.ents[:0]
	if len(sh.free) < maxFreeSets {
		sh.free = append(sh.free, set)
	}
}

// sweep looks at up to sweepSets sets of the shard other than id's and
// removes those whose leases have all expired.
func (sh *leaseShard) sweep(now int64, id uint64) {
	seen := 0
	for k, set := range sh.m {
		if seen++; seen > sweepSets {
			return
		}
		if k != id && set.prune(now) == 0 {
			sh.drop(k, set)
		}
	}
}
