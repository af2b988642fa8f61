// Package memstore is quotagate's in-process store: the embedded default for a
// single process, and the per-process store of the FailLocal failure mode.
//
// State is kept in 64 shards, each a flat open-addressing hash table under its
// own mutex, so no lock is shared by all keys. A key is placed by hashes the
// store computes itself with a per-process random seed (hash/maphash): the
// shard from the key's Redis Cluster hash tag, so that every quota of one Op
// is decided under one lock, and the slot from the whole key. An entry is
// identified by the 64-bit keyed hash of its key rather than the key itself
// (see Memory): two distinct keys share an entry only if their hashes
// collide, with probability n/2^64 per new key when n keys are held (below
// 10^-13 at a million keys), and a client cannot aim a collision because it
// does not know the seed.
//
// # Cost
//
// A decision probes a few consecutive slots of one shard, whether or not the
// store is full; no step on the request path visits a whole shard except a
// table resize, which happens only when a shard's entry count has doubled or
// fallen to a quarter (O(1) per insertion, amortised, and never for a shard
// that stays at its cap). Deciding for a key already present allocates
// nothing, and neither does inserting one into a full store.
//
// # Expiry
//
// Every entry carries its expiry. Expired entries are reclaimed
// incrementally, with no goroutine: every 4th decision in a shard looks at
// the next 32 slots of one shard, taking the 64 shards in turn (8 slots per
// decision on average), removes the expired entries it meets and shrinks a
// table left mostly empty. A store whose entries have all expired is back to
// empty after at most (table slots)/8 further decisions, whichever keys they
// are for.
//
// # Eviction
//
// MaxKeys bounds the entries held. A new key in a full shard first takes the
// place of an expired entry; failing that, the store compares 16 live
// entries (those after the new key's home slot: a sample no client can
// choose) and evicts the one with the most of its quota left at its last
// decision (an identity that has just started, or a bucket nearly whole),
// the soonest to expire among equals. An identity over its limit (nothing
// left) is therefore evicted only when all 16 compared entries are over
// their limit too: when a fraction f of a full shard's entries are over
// their limit, each eviction removes one of them with probability at most
// f^16 (f = 1/2: 1.5*10^-5; f = 1/4: 2.3*10^-10), so a flood of new
// identities, each making one request, evicts the clients it would free
// only after about 65 000 evictions per victim at f = 1/2. Flooding with
// identities that are themselves over their limit costs the attacker a whole
// quota per identity. Evictions() counts both kinds of removal.
//
// # Memory
//
// An entry is 40 bytes: its 8-byte keyed hash, an 8-byte word packing the
// expiry (ms), the algorithm and the eviction score, and three 8-byte state
// words (fixed window: window and count; sliding window: window, count and
// previous count; token bucket: TAT). Tables hold no pointers, so the
// garbage collector does not scan them. A table grows by doubling up to the
// length the cap needs at a load of 7/8: a full store takes 46 bytes per
// entry (DefaultMaxKeys: 11.5 MiB), a growing one between 46 and 91.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// DefaultMaxKeys bounds the number of (bucket, identity) entries kept when
// WithMaxKeys is not given: 262 144 entries, 11.5 MiB of tables when full.
const DefaultMaxKeys = 1 << 18

// shardCount is a power of two so that the top bits of a hash pick the shard.
const shardCount = 64

// Store is an in-process limit.Store. It is safe for concurrent use. The zero
// value is not usable: call New.
type Store struct {
	clock     func() time.Time // nil: the default clock, see nowMS
	base      time.Time        // wall clock at New, with its monotonic reading
	baseMS    int64
	shardSeed maphash.Seed // places a key's hash tag in a shard
	slotSeed  maphash.Seed // identifies a key in its shard
	shards    [shardCount]shard
}

var (
	_ limit.Store          = (*Store)(nil)
	_ limit.InProcessStore = (*Store)(nil)
	_ limit.NamedStore     = (*Store)(nil)
)

// Option configures New.
type Option func(*Store, *int) error

// WithMaxKeys bounds the number of entries kept (default DefaultMaxKeys).
// n must be >= 64, one entry per shard; the bound is exact: the 64 shards
// hold n/64 or n/64+1 entries each, n in all.
func WithMaxKeys(n int) Option {
	return func(_ *Store, max *int) error {
		if n < shardCount {
			return fmt.Errorf("memstore: WithMaxKeys(%d): must be >= %d (one entry per shard)", n, shardCount)
		}
		*max = n
		return nil
	}
}

// WithClock sets the clock decisions are taken at. Tests pass a fake clock; a
// clock that goes backwards is tolerated (see limit.Op). The default is the
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
		s.shards[i].shardData = newShard(m)
	}
	return s, nil
}

// Take implements limit.Store: one atomic decision under the key's shard lock.
// It never fails and never blocks on I/O. op.Hash is not used: the store
// hashes the key itself with its own seed.
func (s *Store) Take(_ context.Context, op *limit.Op) (limit.Result, error) {
	now := s.nowMS()
	id := s.keyID(op.Key)
	idx := s.shardOf(op.Key)
	sh := &s.shards[idx]
	sh.mu.Lock()
	i := sh.find(id)
	live := i >= 0 && sh.heads[i].holds(op.Algorithm, now)
	var st limit.State
	if live {
		st = unpack(op.Algorithm, &sh.words[i])
	}
	next, res := op.Apply(st, now)
	capacity := op.Limit
	if op.Algorithm == limit.TokenBucket {
		capacity = op.Burst
	}
	switch {
	case res.Allowed:
		h := head{id, packMeta(op.Algorithm, now+res.TTLMS, res.Remaining, capacity)}
		if i >= 0 {
			sh.heads[i], sh.words[i] = h, pack(op.Algorithm, next)
		} else {
			sh.add(h, pack(op.Algorithm, next), now, nil)
		}
	case live:
		// Nothing is written for a denial, but its entry is now known to be
		// that far from a whole quota: keep it from being evicted first.
		sh.heads[i].setScore(res.Remaining, capacity)
	}
	// Sweep a step of one shard, the next in turn for this one.
	sh.ticks++
	sweep := (idx + int(sh.ticks)) & (shardCount - 1)
	if sweep == idx {
		sh.sweepSome(now, sweepSlots)
	}
	sh.mu.Unlock()
	if sweep != idx {
		s.shards[sweep].trySweep(now)
	}
	return res, nil
}

// trySweep sweeps a step of sh unless another goroutine holds its lock (it
// is then busy deciding, and the sweep moves on to the next shard).
func (sh *shard) trySweep(now int64) {
	if sh.mu.TryLock() {
		sh.sweepSome(now, sweepSlots)
		sh.mu.Unlock()
	}
}

// keyID is the key's identity in its shard: a 64-bit hash of the whole key,
// keyed with the store's random seed, never 0 (0 marks a free slot).
func (s *Store) keyID(key []byte) uint64 {
	return max(maphash.Bytes(s.slotSeed, key), 1)
}

// shardOf picks the shard from the key's Redis Cluster hash tag (the bytes
// between the first '{' and the next '}', when not empty; else the whole
// key), so that all the keys of one Op share a shard.
func (s *Store) shardOf(key []byte) int {
	return int(maphash.Bytes(s.shardSeed, hashTag(key)) >> 58) // 6 bits: shardCount
}

// hashTag returns the Redis Cluster hash tag of key, or key itself when it
// has none.
func hashTag(key []byte) []byte {
	if i := bytes.IndexByte(key, '{'); i >= 0 {
		if j := bytes.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
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

// InProcess marks Store as an in-process store: the engine calls it without a
// timeout context.
func (s *Store) InProcess() {}

// StoreName returns "memory", the store label in metrics.
func (s *Store) StoreName() string { return "memory" }

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

// Evictions counts entries removed since New, by reason: Expired entries
// were dead (past their time to live) when the sweep or an insertion removed
// them; Live entries were evicted before their time to live to make room at
// the cap, each an identity that starts afresh. A steadily growing Live
// count means MaxKeys is too small for the traffic (or a flood of new
// identities). Read it as counters, e.g. with promlimit.NewStoreCollector.
type Evictions struct {
	Expired, Live uint64
}

// Evictions returns the removal counts since New. Safe for concurrent use;
// it takes each shard's lock in turn.
func (s *Store) Evictions() Evictions {
	var e Evictions
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		e.Expired += sh.reclaimed
		e.Live += sh.evicted
		sh.mu.Unlock()
	}
	return e
}
