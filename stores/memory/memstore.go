// Package memstore is quotagate's in-process store: the embedded default for a
// single process, and the per-process store of the FailLocal failure mode.
//
// State is kept in 64 shards, each a flat hash table under its own mutex, so
// no lock is shared by all keys. A key is placed by hashes the store computes
// itself with a per-process random seed (hash/maphash): the shard from the
// key's Redis Cluster hash tag, which all the quotas of one Op share, so that
// an Op is decided under one lock; the slot from the whole key. An entry is
// identified by the 64-bit keyed hash of its key, not the key itself: state
// stays exact per key, and two distinct keys share an entry only if their
// hashes collide, with probability n/2^64 for a new key when n keys are held
// (5*10^-14 at a million keys). A client cannot aim a collision, nor crowd
// one shard, because it does not know the seed.
//
// # Cost
//
// Each shard's table is a bucketized cuckoo hash table: an entry lives in one
// of two 8-slot buckets chosen by its hash. A decision reads those two
// buckets and the entry's state, whether or not the store is full; at the
// cap the new entry takes the place of the one evicted from its own buckets.
// No step on the request path visits a whole shard except a table resize,
// which happens only when a shard's entry count has doubled or fallen to a
// quarter since the last one (O(1) per insertion, amortised) and never while
// a shard stays at its cap. Deciding for a key already present allocates
// nothing, and neither does inserting one into a full store.
//
// # Expiry
//
// Every entry carries its expiry; a state is used only while its expiry is
// after now, and once the clock has passed it the entry may be reclaimed at
// any later decision (a clock that then steps back behind the expiry finds
// the key fresh). Expired entries are reclaimed incrementally, with no
// goroutine: every decision looks at the next 8 slots of its shard, and every
// 16th decision in a shard at the next 128 slots of another, each shard's
// decisions taking the 64 shards in turn (so that a quiet shard is swept by
// the others' traffic, while a decision takes another shard's lock only
// once in 16); it removes the expired entries it meets and shrinks a table
// left mostly empty. Each shard keeps a bound on its earliest expiry (the
// least one its last whole pass saw, lowered by every write), and its sweep
// steps look at nothing before it: while every entry held is live, as on a
// busy server whose clients keep coming back, a decision sweeps nothing. A shard of S slots is thus swept whole within 8*S
// decisions in any one shard, and within 8*S + 65 472 decisions whichever
// shards they fall in (a step that finds the shard busy is skipped). After 100 000 one-off clients whose windows have
// ended, about 12 300 further decisions for a single identity empty the
// store (TestSweepReclaimsExpiredEntries).
//
// # Eviction
//
// MaxKeys bounds the entries held. A new key in a full shard takes the place
// of an entry of its own two buckets (up to 16 entries, about 15 at the
// cap's load; a sample no client can choose): the first expired one, else
// the one with the largest part of its quota left at its last decision (a
// client that has just started, a bucket nearly whole), the soonest to
// expire among equals. A client over its limit (nothing left) is evicted only
// when every entry compared is over its limit too: if a fraction f of a full
// shard's entries are, an eviction removes one of them with probability
// about f^15 (f = 1/2: 3*10^-5; f = 1/4: 10^-9). A flood of new identities,
// one request each, therefore leaves locked-out clients locked out: with 200
// of them and 10 x MaxKeys new identities, all 200 stay denied at MaxKeys
// 1 024 and at the default, for every algorithm (the test,
// TestFloodKeepsLimitedClientsLimited, requires 99%). To push out exhausted
// clients, an attacker must exhaust its own identities: a whole quota per
// identity. Entries of the Op being decided are never
// evicted for one another. Evictions reports both kinds of removal
// (promlimit.NewEvictionsCollector exposes them).
//
// # Memory
//
// An entry is 40 bytes: its 8-byte keyed hash, an 8-byte word packing the
// expiry (ms), the algorithm and the eviction score, and three 8-byte state
// words (fixed window: window and count; sliding window: window, count and
// previous count; token bucket: TAT and its fraction). Tables hold no
// pointers, so the garbage collector does not scan them. A table grows by
// doubling up to the size the cap needs at a load of 15/16: a full store
// takes 43 to 44 bytes of heap per entry (DefaultMaxKeys: 11 MiB; 1 000 000
// entries: 41 MiB), and adds 52 to 67 bytes per entry to a process's RSS,
// which also holds what the runtime keeps of the smaller tables left behind
// while growing (TestMemoryPerKey). A store still growing takes up to twice
// the bytes per entry between two resizes.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// DefaultMaxKeys bounds the number of entries kept (one per quota and
// identity) when WithMaxKeys is not given: 262 144 entries, 11 MiB of tables
// when full, and 13 to 17 MiB of RSS measured in a process that filled it
// (see Memory in the package doc).
const DefaultMaxKeys = 1 << 18

// shardCount is a power of two so that the top bits of a hash pick the shard.
const shardCount = 64

// opKeys is the most keys one Op names: its quotas, and with a block rule
// the block record and the unsettled charges (limitstore.Block).
const opKeys = limitstore.MaxQuotas + 2

// minMaxKeys is the smallest MaxKeys: every key of one Op fits its shard.
const minMaxKeys = shardCount * opKeys

// Store is an in-process limitstore.Store. It is safe for concurrent use. The zero
// value is not usable: call New.
type Store struct {
	limitstore.Claims // the unnamed Limiters built on this Store

	clock     func() time.Time // nil: the default clock, see nowMS
	base      time.Time        // wall clock at New, with its monotonic reading
	baseMS    int64
	shardSeed maphash.Seed // places a key's hash tag in a shard
	slotSeed  maphash.Seed // identifies a key in its shard
	shards    [shardCount]shard
	leases    [shardCount]leaseShard // concurrency slots (lease.go)
}

var (
	_ limitstore.Store                        = (*Store)(nil)
	_ interface{ Describe() limitstore.Info } = (*Store)(nil)
)

// Option configures New.
type Option func(*Store, *int) error

// WithMaxKeys bounds the number of entries kept (default DefaultMaxKeys;
// an entry is one quota of one identity, or one record of a block rule).
// n must be >= 384, so that each of the 64 shards holds every key of one
// Op (limitstore.MaxQuotas quotas, a block record and the unsettled
// charges); the bound is exact: the shards hold n/64 or n/64+1 entries
// each, n in all.
func WithMaxKeys(n int) Option {
	return func(_ *Store, max *int) error {
		if n < minMaxKeys {
			return fmt.Errorf("memstore: WithMaxKeys(%d): must be >= %d (%d entries per shard: every key of one Op)", n, minMaxKeys, opKeys)
		}
		*max = n
		return nil
	}
}

// WithClock sets the clock decisions are taken at. Tests pass a fake clock; a
// clock that goes backwards is tolerated (see limitstore.Op). The default is the
// wall clock read once at New plus the monotonic time elapsed since: immune to
// wall-clock steps, and one monotonic read per decision instead of two
// clock reads.
func WithClock(now func() time.Time) Option {
	return func(s *Store, _ *int) error {
		if now == nil {
			return fmt.Errorf("memstore: WithClock(nil)")
		}
		s.clock = now
		return nil
	}
}

// New returns an empty Store, which allocates its tables as keys arrive.
// Errors name the bad option.
func New(opts ...Option) (*Store, error) {
	s := &Store{base: time.Now(), shardSeed: maphash.MakeSeed(), slotSeed: maphash.MakeSeed()}
	s.baseMS = s.base.UnixMilli()
	maxKeys := DefaultMaxKeys
	for _, o := range opts {
		if err := o(s, &maxKeys); err != nil {
			return nil, err
		}
	}
	for i := range s.shards {
		m := maxKeys / shardCount
		if i < maxKeys%shardCount {
			m++
		}
		s.shards[i].init(m)
	}
	return s, nil
}

// Take implements limitstore.Store: one atomic decision for all the Op's quotas
// under one shard lock (the shard of their common hash tag; keys without a
// common tag, which the engine never sends, lock their shards in index
// order). It never fails and never blocks on I/O.
//
// An Op of one quota, every Op the engine sends today, takes the steps of
// takeN without its loops over quotas and shards, here, and the Result is
// written in place (limitstore.Op.ApplyTo): a Result is a few hundred
// bytes, each copy a few dozen instructions.
func (s *Store) Take(_ context.Context, op *limitstore.Op, res *limitstore.Result) error {
	if op.Block.ForMS > 0 && (!op.Refund || op.Block.LeaseMS > 0) {
		s.takeBlocked(op, res) // block.go
		return nil
	}
	if op.N != 1 {
		s.takeN(op, res)
		return nil
	}
	q := &op.Quotas[0]
	id := s.keyID(q.Key)
	i := s.shardOf(hashTag(q.Key))
	sh := &s.shards[i]
	early := s.early()
	sh.mu.Lock()
	locked := [1]int{i}
	now := s.at(early, locked[:])
	var sts [limitstore.MaxQuotas]limitstore.State
	p := sh.find(id)
	live := p >= 0 && sh.ents[p].holds(q.Algorithm, now)
	if live {
		unpack(&sts[0], q.Algorithm, &sh.ents[p].w)
		sts[0].Epoch = sh.epochOf(id)
	}
	op.ApplyTo(res, &sts, now)
	r := &res.Quotas[0]
	switch {
	case r.TTLMS <= 0:
		if live && !op.Peek { // rank the entry for eviction (see takeN); a Peek writes nothing
			sh.ents[p].setScore(r.Remaining, capacityOf(q))
		}
	case op.Refund: // keeps the expiry, never creates a key
		if live {
			h := &sh.ents[p]
			h.meta = packMeta(q.Algorithm, h.exp(), r.Remaining, capacityOf(q))
			sh.ents[p].w = pack(q.Algorithm, &sts[0])
		}
	case p >= 0:
		if !live {
			sh.forget(id)
		}
		sh.set(p, id, entry{packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q)), pack(q.Algorithm, &sts[0])})
	default:
		keep := [1]uint64{id}
		sh.add(id, entry{packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q)), pack(q.Algorithm, &sts[0])}, now, keep[:])
	}
	cross := s.sweep(i, locked[:], now)
	sh.mu.Unlock()
	if cross >= 0 {
		s.shards[cross].trySweep(now)
	}
	return nil
}

// writtenLater reports whether a quota after i names the key of quota i
// and is written too (TTLMS > 0): a key named twice in one Op keeps the
// last State written to it, as when it is held already.
func writtenLater(ids []uint64, i int, res *limitstore.Result) bool {
	for j := i + 1; j < len(ids); j++ {
		if ids[j] == ids[i] && res.Quotas[j].TTLMS > 0 {
			return true
		}
	}
	return false
}

// takeN is Take for any number of quotas, its Result written into *res.
func (s *Store) takeN(op *limitstore.Op, res *limitstore.Result) {
	n := min(max(op.N, 0), limitstore.MaxQuotas)
	var ids [limitstore.MaxQuotas]uint64
	var shards [limitstore.MaxQuotas]int
	one := true // all keys in one shard
	var tag0 []byte
	for i := range n {
		key := op.Quotas[i].Key
		ids[i] = s.keyID(key)
		switch tag := hashTag(key); {
		case i == 0:
			tag0, shards[0] = tag, s.shardOf(tag)
		case bytes.Equal(tag, tag0):
			shards[i] = shards[0]
		default:
			shards[i] = s.shardOf(tag)
			one = one && shards[i] == shards[0]
		}
	}
	var order [limitstore.MaxQuotas]int
	early := s.early()
	locked := s.lock(shards[:n], one, &order)
	now := s.at(early, locked)

	// Read: an absent or expired entry, or one written by another
	// algorithm, is a fresh State.
	var sts [limitstore.MaxQuotas]limitstore.State
	var pos [limitstore.MaxQuotas]int
	for i := range n {
		q, sh := &op.Quotas[i], &s.shards[shards[i]]
		if pos[i] = sh.find(ids[i]); pos[i] >= 0 && sh.ents[pos[i]].holds(q.Algorithm, now) {
			unpack(&sts[i], q.Algorithm, &sh.ents[pos[i]].w)
			sts[i].Epoch = sh.epochOf(ids[i])
		} else if op.Refund {
			pos[i] = -1 // nothing to refund, and a refund never creates a key
		}
	}
	op.ApplyTo(res, &sts, now)

	// Write: what Apply says (TTLMS > 0), entries present first, since
	// adding one may move the others.
	added := false
	for i := range n {
		q, r, sh := &op.Quotas[i], &res.Quotas[i], &s.shards[shards[i]]
		capacity := capacityOf(q)
		switch p := pos[i]; {
		case p < 0:
			added = added || r.TTLMS > 0 && !op.Refund
		case r.TTLMS > 0 && op.Refund: // keeps the expiry
			h := &sh.ents[p]
			h.meta = packMeta(q.Algorithm, h.exp(), r.Remaining, capacity)
			sh.ents[p].w = pack(q.Algorithm, &sts[i])
		case r.TTLMS > 0:
			if sts[i].Epoch == 0 {
				sh.forget(ids[i]) // a State decided on none
			}
			sh.set(p, ids[i], entry{packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacity), pack(q.Algorithm, &sts[i])})
		case !op.Peek && sh.ents[p].holds(q.Algorithm, now):
			// Nothing is written for a denial, but the entry is now known
			// to be that far from a whole quota: rank it so for eviction
			// (a Peek writes nothing, the score included).
			sh.ents[p].setScore(r.Remaining, capacity)
		}
	}
	for i := 0; added && i < n; i++ {
		q, r := &op.Quotas[i], &res.Quotas[i]
		if pos[i] >= 0 || r.TTLMS <= 0 || op.Refund || writtenLater(ids[:n], i, res) {
			continue
		}
		e := entry{packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q)), pack(q.Algorithm, &sts[i])}
		s.shards[shards[i]].add(ids[i], e, now, ids[:n])
	}

	cross := s.sweep(shards[0], locked, now)
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	if cross >= 0 {
		s.shards[cross].trySweep(now)
	}
}

// sweep sweeps a step of shard i and, every crossEvery-th decision, a
// longer step of another, the next in turn for this one: at once when its
// lock is held (locked), else it returns it (-1: none) for trySweep once
// the locks are released.
func (s *Store) sweep(i int, locked []int, now int64) (cross int) {
	sh := &s.shards[i]
	sh.sweepSome(now, sweepSlots)
	if sh.ticks++; sh.ticks%crossEvery != 0 {
		return -1
	}
	cross = (i + int(sh.ticks/crossEvery)) & (shardCount - 1)
	if slices.Contains(locked, cross) {
		s.shards[cross].sweepSome(now, crossSlots)
		return -1
	}
	return cross
}

// capacityOf is the most a quota holds, what its eviction score is a
// fraction of: Limit, or Burst for a TokenBucket.
func capacityOf(q *limitstore.Quota) int64 {
	if q.Algorithm == limit.TokenBucket {
		return q.Burst
	}
	return q.Limit
}

// lock locks the shards of an Op (one, or each distinct one in index order)
// and returns them.
func (s *Store) lock(shards []int, one bool, order *[limitstore.MaxQuotas]int) []int {
	locked := order[:1]
	if len(shards) == 0 { // no quota: nothing to decide, any shard will do
		order[0] = 0
	} else if one {
		order[0] = shards[0]
	} else {
		locked = order[:copy(order[:], shards)]
		slices.Sort(locked)
		locked = slices.Compact(locked)
	}
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	return locked
}

// trySweep sweeps a step of another shard unless a goroutine holds its lock
// (it is then busy deciding, and sweeps it itself).
func (sh *shard) trySweep(now int64) {
	if now >= sh.due.Load() && sh.mu.TryLock() {
		sh.sweepSome(now, crossSlots)
		sh.mu.Unlock()
	}
}

// keyID is the key's identity in its shard: a 64-bit hash of the whole key,
// keyed with the store's random seed, never 0 (0 marks a free slot).
func (s *Store) keyID(key []byte) uint64 {
	return max(maphash.Bytes(s.slotSeed, key), 1)
}

// shardOf picks the shard of a key from its hash tag (see hashTag), so that
// all the keys of one Op share a shard.
func (s *Store) shardOf(tag []byte) int {
	return int(maphash.Bytes(s.shardSeed, tag) >> 58) // 6 bits: shardCount
}

// hashTag returns the Redis Cluster hash tag of key: the bytes between the
// first '{' and the next '}', when there are any; else the whole key.
func hashTag(key []byte) []byte {
	i := bytes.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	if j := bytes.IndexByte(key[i+1:], '}'); j > 0 {
		return key[i+1 : i+1+j]
	}
	return key
}

// nowMS reads the store's clock in Unix ms.
func (s *Store) nowMS() int64 {
	if s.clock != nil {
		return s.clock().UnixMilli()
	}
	return s.baseMS + int64(time.Since(s.base)/time.Millisecond)
}

// early reads the default clock for a decision before it takes its shards'
// locks (0 with WithClock): see at.
func (s *Store) early() int64 {
	if s.clock != nil {
		return 0
	}
	return s.nowMS()
}

// at returns the instant of a decision on the locked shards, whose locks
// the caller holds, given early's reading from before it took them. The
// instants of one shard's decisions never go back: a goroutine that waited
// for a lock would otherwise decide at an instant older than the decision
// before it on the same key, and a token bucket whose reservations reach
// MaxWait ahead would read that TAT as a clock step back and clamp
// reservations away (over-admission). With the default clock, read before
// the locks so that they are held for less, that is the latest instant any
// of the shards has decided at, when it is later than early (the clock is
// monotonic: it is then at most the wait for the lock behind). A clock set
// with WithClock is read under the locks, as it is: the instants of one key
// then go back only when that clock does.
func (s *Store) at(early int64, locked []int) int64 {
	if s.clock != nil {
		return s.clock().UnixMilli()
	}
	now := early
	for _, i := range locked {
		now = max(now, s.shards[i].last)
	}
	for _, i := range locked {
		if sh := &s.shards[i]; sh.last < now { // written once per ms at most: see shardData
			sh.last = now
		}
	}
	return now
}

// Describe tells the engine that Store is "memory", the store label in
// metrics, and that it decides blocks (limitstore.Info.Blocks).
func (s *Store) Describe() limitstore.Info { return limitstore.Info{Name: "memory", Blocks: true} }

// Len returns the number of entries held, expired ones not yet reclaimed
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns the number of entries removed since New, by reason:
// expired entries were dead (past their time to live) when the sweep or an
// insertion removed them; live entries were evicted before their time to
// live to make room at the cap, each an identity that starts afresh (see
// the package doc for which ones go). A live count that keeps growing means
// MaxKeys is too small for the traffic, or a flood of new identities.
// promlimit.NewEvictionsCollector exposes both as counters. Safe for
// concurrent use; it takes each shard's lock in turn.
func (s *Store) Evictions() (expired, live uint64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		expired += sh.reclaimed
		live += sh.evicted
		sh.mu.Unlock()
	}
	return expired, live
}
