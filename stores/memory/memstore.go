// Package memstore is quotagate's in-process store: the embedded default for a
// single process, and the per-process store of the FailLocal failure mode.
//
// State is kept in 64 shards, each a map under its own mutex, so no lock is
// shared by all keys. Memory is bounded by MaxKeys: when a shard is full,
// expired entries are reclaimed first, then an arbitrary live entry is
// evicted (that identity starts afresh). The constructor starts no goroutine;
// expired entries are reclaimed lazily. Deciding for a key already present
// allocates nothing.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// DefaultMaxKeys bounds the number of (bucket, identity) entries kept when
// WithMaxKeys is not given: 262 144 entries, roughly 40 MiB with typical keys.
const DefaultMaxKeys = 1 << 18

// shardCount is a power of two so that a mask picks the shard.
const shardCount = 64

// Store is an in-process limit.Store. It is safe for concurrent use. The zero
// value is not usable: call New.
type Store struct {
	clock  func() time.Time // nil: the default clock, see nowMS
	base   time.Time        // wall clock at New, with its monotonic reading
	baseMS int64
	seed   maphash.Seed // per-process: clients cannot aim hash collisions
	shards [shardCount]shard
}

type shard struct {
	mu        sync.Mutex
	m         map[uint64]*entry // by keyed hash of the key; entries with one hash chain on next
	n         int               // entries held, chained ones included
	max       int
	nextSweep int64 // Unix ms before which a sweep would find nothing expired
	_         [64]byte
}

// entry is one (bucket, quota, identity). The map is keyed by a keyed 64-bit
// hash of the key (hash/maphash), which is cheaper to look up than the
// ~40-byte key string; the key itself is kept to tell the rare colliding
// keys apart, which chain on next. Entries are pointers so that updating a present key writes
// through the pointer instead of re-inserting it.
type entry struct {
	key  string
	st   limit.State
	exp  int64 // Unix ms at which the entry is dead
	next *entry
}

var (
	_ limit.Store                             = (*Store)(nil)
	_ interface{ Describe() limit.StoreInfo } = (*Store)(nil)
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

// New returns an empty Store. Errors name the bad option.
func New(opts ...Option) (*Store, error) {
	s := &Store{base: time.Now(), seed: maphash.MakeSeed()}
	s.baseMS = s.base.UnixMilli()
	maxKeys := DefaultMaxKeys
	for _, o := range opts {
		if err := o(s, &maxKeys); err != nil {
			return nil, err
		}
	}
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
		s.shards[i].max = maxKeys / shardCount
		if i < maxKeys%shardCount {
			s.shards[i].max++
		}
	}
	return s, nil
}

// Take implements limit.Store: one atomic decision for all the Op's quotas.
// Shards are chosen by the keys' Redis Cluster hash tag, which all keys of
// one Op share, so one shard lock covers the whole decision (keys without a
// common tag lock their shards in index order). It never fails and never
// blocks on I/O.
func (s *Store) Take(_ context.Context, op *limit.Op) (limit.Result, error) {
	now := s.nowMS()
	n := min(max(op.N, 0), limit.MaxQuotas)
	var shards, locked [limit.MaxQuotas]int
	var hashes [limit.MaxQuotas]uint64
	for i := range n {
		key := op.Quotas[i].Key
		h := maphash.Bytes(s.seed, hashTag(key))
		shards[i] = int((h ^ h>>32) & (shardCount - 1))
		hashes[i] = maphash.Bytes(s.seed, key)
	}
	locked = shards
	order := locked[:n]
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	var sts [limit.MaxQuotas]limit.State
	for i := range n {
		if e := s.shards[shards[i]].find(hashes[i], op.Quotas[i].Key); e != nil && e.exp > now {
			sts[i] = e.st
		}
	}
	res := op.Apply(&sts, now)
	for i := range n {
		ttl := res.Quotas[i].TTLMS
		if ttl <= 0 { // denied, or a refund that changed nothing
			continue
		}
		sh, key := &s.shards[shards[i]], op.Quotas[i].Key
		e := sh.find(hashes[i], key)
		switch {
		case op.Refund: // never creates a key, keeps its expiry
			if e != nil && e.exp > now {
				e.st = sts[i]
			}
		case e == nil:
			e = sh.insert(hashes[i], key, now)
			fallthrough
		default:
			e.st, e.exp = sts[i], now+ttl
		}
	}
	for _, i := range order {
		s.shards[i].mu.Unlock()
	}
	return res, nil
}

// hashTag returns key's Redis Cluster hash tag (the bytes between the first
// '{' and the next '}', when not empty), else the whole key.
func hashTag(key []byte) []byte {
	if i := bytes.IndexByte(key, '{'); i >= 0 {
		if j := bytes.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// find returns the entry of key, or nil.
func (sh *shard) find(hash uint64, key []byte) *entry {
	e := sh.m[hash]
	for e != nil && e.key != string(key) {
		e = e.next
	}
	return e
}

// nowMS reads the store's clock in Unix ms.
func (s *Store) nowMS() int64 {
	if s.clock != nil {
		return s.clock().UnixMilli()
	}
	return s.baseMS + int64(time.Since(s.base)/time.Millisecond)
}

// maxChain bounds a chain of keys sharing one 64-bit hash (a chance
// collision: the hash is keyed per process); past the bound the oldest
// member goes.
const maxChain = 8

// insert adds a key, making room first when the shard is full: expired
// entries go first (a sweep runs only when one could find something), then
// an arbitrary live entry.
func (sh *shard) insert(hash uint64, key []byte, now int64) *entry {
	if sh.n >= sh.max && now >= sh.nextSweep {
		next := int64(1<<63 - 1)
		for h, e := range sh.m {
			before := e.len()
			live := e.prune(now)
			sh.n -= before - live.len()
			if live == nil {
				delete(sh.m, h)
				continue
			}
			if live != e {
				sh.m[h] = live
			}
			for ; live != nil; live = live.next {
				next = min(next, live.exp)
			}
		}
		sh.nextSweep = next
	}
	head := sh.m[hash]
	if sh.n >= sh.max {
		for h, e := range sh.m { // the first slot Go's map order yields
			if h == hash { // the key's own chain: its oldest member goes
				if head = head.dropLast(); head == nil {
					delete(sh.m, h)
				} else {
					sh.m[h] = head
				}
				sh.n--
			} else {
				delete(sh.m, h)
				sh.n -= e.len()
			}
			break
		}
	}
	if head.len() >= maxChain {
		head = head.dropLast()
		sh.n--
	}
	e := &entry{key: string(key), next: head}
	sh.m[hash] = e
	sh.n++
	return e
}

// len is the length of the chain starting at e (0 for nil).
func (e *entry) len() int {
	n := 0
	for ; e != nil; e = e.next {
		n++
	}
	return n
}

// dropLast removes the last (oldest) member of a chain and returns the head
// (nil when e was the only member).
func (e *entry) dropLast() *entry {
	if e == nil || e.next == nil {
		return nil
	}
	p := e
	for p.next.next != nil {
		p = p.next
	}
	p.next = nil
	return e
}

// prune drops the expired entries of a chain and returns its new head.
func (e *entry) prune(now int64) *entry {
	var head, tail *entry
	for ; e != nil; e = e.next {
		if e.exp > now {
			if tail == nil {
				head = e
			} else {
				tail.next = e
			}
			tail = e
		}
	}
	if tail != nil {
		tail.next = nil
	}
	return head
}

// Describe tells the engine that Store is in-process (it is called without
// the store timeout) and is "memory", the store label in metrics.
func (s *Store) Describe() limit.StoreInfo { return limit.StoreInfo{Name: "memory", InProcess: true} }

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
