package memstore

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// A shard's table is a bucketized cuckoo hash table: flat arrays of
// 8-slot buckets, where an entry lives in one of two buckets chosen by its
// id (the key's 64-bit keyed hash). A lookup reads at most those two
// buckets, a removal clears one slot, and an insertion takes a free slot of
// either bucket (its home slot there when it can), else moves an entry of a full bucket to its other bucket
// (a cuckoo kick; a few at most at the load bounds below). At the cap the
// new entry replaces the one evicted from its own two buckets: O(1), no
// kick. The tables hold no pointers, so the garbage collector never scans
// them, and an entry costs its 40 bytes and nothing else:
//
//	ids[i]  8 B  the id (0 marks a free slot)
//	ents[i] 32 B a meta word (expiry, algorithm, eviction score) and the
//	             state: three words
//
// The halves are separate arrays, each aligned to its size: a bucket's ids
// are one cache line, which a lookup reads, and a decision then reads and
// writes its entry, one more line (an array of 32-byte entries never
// splits one across two); for an entry in its home slot (see home) both
// lines are fetched at once. Eviction and sweeping read the metas of the
// slots they look at. A bucket index is fastrange(x, buckets), the high
// bits of x*buckets, so any number of buckets works and the table at the
// cap is exactly what MaxKeys needs at the maximum load.

const bucketSlots = 8

// Load bounds: a table grows (to about twice its length) before an
// insertion would take it above loadNum/loadDen of its slots, and shrinks
// (to about half) when a sweep leaves it below a quarter of that. 2-choice
// cuckoo hashing with 8-slot buckets holds up to about 98% of its slots.
const (
	loadNum = 15
	loadDen = 16
)

// maxKicks bounds the entries one insertion moves; past it (not met in
// practice at these loads) the table grows, or, at its size for the cap, an
// entry is evicted from the homeless entry's buckets.
const maxKicks = 128

// Incremental sweeping: every decision looks at sweepSlots slots of its own
// shard (under the lock it holds), and every crossEvery-th decision of a
// shard at crossSlots slots of another, the 64 in turn, so that a quiet
// shard is swept by its neighbours' traffic (8 slots per decision for each).
const (
	sweepSlots = 8
	crossEvery = 16
	crossSlots = crossEvery * sweepSlots
)

// entry is what a slot holds besides its id: the meta word and the state.
type entry struct {
	// meta packs exp<<metaExpShift | algorithm<<8 | score: exp is the Unix ms
	// at which the entry is dead (clamped to ±2^53), the algorithm is the one
	// that wrote the state, score (0..255) is the remaining fraction of the
	// quota recorded at the last decision, 255 = whole.
	meta int64
	w    words
}

// words is an entry's State: window algorithms Window, Count, Prev;
// TokenBucket TAT, TATFrac.
type words [3]int64

const (
	metaExpShift = 10
	maxExp       = 1<<53 - 1
	minExp       = -(1 << 53)
)

func (e *entry) exp() int64 { return e.meta >> metaExpShift }

func (e *entry) score() int64 { return e.meta & 255 }

// holds reports whether e is live and was written by algorithm a.
func (e *entry) holds(a limit.Algorithm, now int64) bool {
	return e.exp() > now && limit.Algorithm(e.meta>>8&3) == a
}

// unpack writes the State of algorithm a held in w into *st, a zero State.
func unpack(st *limitstore.State, a limit.Algorithm, w *words) {
	if a == limit.TokenBucket {
		st.TAT, st.TATFrac = w[0], w[1]
		return
	}
	st.Window, st.Count, st.Prev = w[0], w[1], w[2]
}

// pack returns the words holding st, a State of algorithm a.
func pack(a limit.Algorithm, st *limitstore.State) words {
	if a == limit.TokenBucket {
		return words{st.TAT, st.TATFrac}
	}
	return words{st.Window, st.Count, st.Prev}
}

// packMeta packs an entry's meta word: algorithm a, dead at exp, with the
// eviction score of remaining out of capacity.
func packMeta(a limit.Algorithm, exp, remaining, capacity int64) int64 {
	exp = min(max(exp, minExp), maxExp)
	return exp<<metaExpShift | int64(a&3)<<8 | scoreOf(remaining, capacity)
}

// setScore replaces the eviction score, keeping the rest.
func (e *entry) setScore(remaining, capacity int64) {
	e.meta = e.meta&^255 | scoreOf(remaining, capacity)
}

// scoreOf is remaining/capacity in 1/255ths, rounded down: 0 for an
// exhausted quota, 255 for a whole one.
func scoreOf(remaining, capacity int64) int64 {
	if capacity <= 0 || remaining <= 0 {
		return 0
	}
	if remaining >= capacity {
		return 255
	}
	return remaining * 255 / capacity // remaining < capacity < 2^53: no overflow
}

// shard is one lock and its table.
type shard struct {
	shardData
	// pad rounds shard up to whole cache lines, so that two shards' hot
	// fields never share one.
	_ [(cacheLine - unsafe.Sizeof(shardData{})%cacheLine) % cacheLine]byte
}

const cacheLine = 64

type shardData struct {
	// The fields every decision writes, mu and ticks, come first and share
	// a cache line (a shard's own: it starts at most 16 bytes into one, and
	// the pad of the shard before fills the rest); the others are written
	// only when an entry is added or removed, a sweep runs or the clock
	// passes a millisecond, so that two cores deciding on one shard pass
	// one line of its header between them, not two.
	mu sync.Mutex
	// ticks counts decisions, to schedule sweeps.
	ticks uint32
	ids   []uint64 // bucketSlots per bucket
	ents  []entry  // metas and states, parallel to ids
	n     int      // entries held
	max   int      // entries at most (MaxKeys' share)
	full  int      // buckets at the cap: the fewest that hold max
	// sweep is the next slot the incremental sweep looks at.
	sweep int
	// due is at most the earliest expiry of an entry held (MaxInt64: none
	// held), so that a sweep step before it is skipped: nothing can have
	// expired. It is written under mu and read without it by other shards'
	// decisions (trySweep), hence atomic. passMin is the earliest expiry the
	// current pass of the sweep has seen behind its cursor, or that was
	// written since the pass began (see wrote): at the end of a pass, which
	// has then seen every entry, it becomes due.
	due     atomic.Int64
	passMin int64
	// last is the latest instant a decision on this shard was taken at
	// with the default clock (see Store.at).
	last int64
	// reclaimed counts expired entries removed; evicted counts live entries
	// removed to make room at the cap.
	reclaimed, evicted uint64
	// epochs holds the State.Epoch of the entries a Reset found live (see
	// Reset), by id, for as long as the entry holds that State: an entry
	// removed, or replaced by a State decided on none (it had expired),
	// leaves it. Every other entry is of epoch 0, so the map is nil until
	// a Reset, and an entry keeps its 40 bytes.
	epochs map[uint64]int64
}

// epochOf is the epoch of the live entry id.
func (sh *shardData) epochOf(id uint64) int64 {
	if len(sh.epochs) == 0 {
		return 0
	}
	return sh.epochs[id]
}

// forget drops the epoch of id, whose entry is removed or holds a new
// State of epoch 0.
func (sh *shardData) forget(id uint64) {
	if len(sh.epochs) > 0 {
		delete(sh.epochs, id)
	}
}

func newShard(max int) *shardData {
	sh := new(shardData)
	sh.init(max)
	return sh
}

// init makes sh an empty shard of at most max entries.
func (sh *shardData) init(max int) {
	sh.max, sh.full, sh.passMin = max, bucketsFor(max), math.MaxInt64
	sh.due.Store(math.MaxInt64)
}

// wrote records that an entry expiring at exp was written or moved: it may
// lower due, and the current pass's passMin.
func (sh *shardData) wrote(exp int64) {
	if exp < sh.passMin {
		sh.passMin = exp
	}
	if exp < sh.due.Load() {
		sh.due.Store(exp)
	}
}

// capacity is the most entries a table of nb buckets holds.
func capacity(nb int) int { return nb * bucketSlots * loadNum / loadDen }

// bucketsFor is the fewest buckets that hold n entries.
func bucketsFor(n int) int {
	const per = bucketSlots * loadNum
	return max((n*loadDen+per-1)/per, 1)
}

// buckets returns the two buckets of id in a table of nb: fastrange of id's
// high half, and another one chosen by its low half (the same only when
// nb is 1).
func buckets(id uint64, nb int) (int, int) {
	b1, _ := bits.Mul64(id, uint64(nb))
	if nb == 1 {
		return 0, 0
	}
	d, _ := bits.Mul64(id<<32, uint64(nb-1))
	b2 := int(b1) + 1 + int(d)
	if b2 >= nb {
		b2 -= nb
	}
	return int(b1), b2
}

// bucket returns the ids of bucket b.
func (sh *shardData) bucket(b int) []uint64 {
	return sh.ids[b*bucketSlots : b*bucketSlots+bucketSlots : b*bucketSlots+bucketSlots]
}

// find returns the slot holding id, or -1.
func (sh *shardData) find(id uint64) int {
	nb := len(sh.ids) / bucketSlots
	if nb == 0 {
		return -1
	}
	b1, b2 := buckets(id, nb)
	if h := home(id, b1); sh.ids[h] == id {
		return h
	}
	for j, x := range sh.bucket(b1) {
		if x == id {
			return b1*bucketSlots + j
		}
	}
	for j, x := range sh.bucket(b2) {
		if x == id {
			return b2*bucketSlots + j
		}
	}
	return -1
}

// set stores id and e in slot i.
func (sh *shardData) set(i int, id uint64, e entry) {
	if sh.ids[i] != id { // written only when it changes: see shardData
		sh.ids[i] = id
	}
	sh.ents[i] = e
	sh.wrote(e.exp())
}

// clearSlot frees slot i.
func (sh *shardData) clearSlot(i int) {
	sh.ids[i], sh.ents[i] = 0, entry{}
}

// home is id's home slot in bucket b: the one of its 8 slots that id's bits
// pick. An entry is placed there when it can be (putFree), and find looks
// there first, so that for most lookups the slot, and so the entry's cache
// line, is known before the bucket's ids are read: the processor fetches
// both lines at once instead of one after the other.
func home(id uint64, b int) int { return b*bucketSlots + int(id>>32&(bucketSlots-1)) }

// putFree stores id and e in a free slot of bucket b, if it has one: id's
// home slot when it is free or its entry is away from its own home (that
// entry then moves to the free slot), else the first free one.
func (sh *shardData) putFree(b int, id uint64, e *entry) bool {
	free := -1
	for j, x := range sh.bucket(b) {
		if x == 0 {
			free = b*bucketSlots + j
			break
		}
	}
	if free < 0 {
		return false
	}
	if h := home(id, b); free != h {
		switch x := sh.ids[h]; {
		case x == 0: // free itself
			free = h
		case home(x, b) != h: // taken by an entry away from its home: it moves
			sh.set(free, x, sh.ents[h])
			free = h
		}
	}
	sh.set(free, id, *e)
	return true
}

// place stores id (absent) and e in one of its buckets, kicking entries to
// their other bucket while both are full. It returns false when maxKicks
// kicks found no free slot: id and e then hold the entry left without a
// slot (not necessarily the one given).
func (sh *shardData) place(id *uint64, e *entry) bool {
	nb := len(sh.ids) / bucketSlots
	b1, b2 := buckets(*id, nb)
	if sh.putFree(b1, *id, e) || sh.putFree(b2, *id, e) {
		return true
	}
	b := b1
	for range maxKicks {
		// a random slot, so that kicks cannot cycle
		i := b*bucketSlots + int(rand.Uint32()%bucketSlots)
		sh.ids[i], *id = *id, sh.ids[i]
		sh.ents[i], *e = *e, sh.ents[i]
		sh.wrote(sh.ents[i].exp())
		if c1, c2 := buckets(*id, nb); c1 == b {
			b = c2
		} else {
			b = c1
		}
		if sh.putFree(b, *id, e) {
			return true
		}
	}
	return false
}

// add inserts id (absent) with its entry e, making room first: at the cap
// it evicts one entry (never one whose id is in keep), below it the table
// grows when it must.
func (sh *shardData) add(id uint64, e entry, now int64, keep []uint64) {
	switch {
	case sh.n >= sh.max:
		if !sh.evict(id, now, keep) {
			sh.evicted++ // every entry in keep: see settle
			return
		}
	case sh.n+1 > capacity(len(sh.ids)/bucketSlots):
		sh.resize(sh.sizeFor(sh.n+1), now)
	}
	sh.settle(id, e, now, keep)
	sh.n++
}

// settle places id and e, growing the table or evicting when the kicks run
// out; n is not changed.
func (sh *shardData) settle(id uint64, e entry, now int64, keep []uint64) {
	for !sh.place(&id, &e) {
		if nb := len(sh.ids) / bucketSlots; nb < sh.full {
			sh.resize(sh.grown(nb), now)
		} else if !sh.evict(id, now, keep) {
			// Every entry is in keep, which a shard of at least opKeys
			// entries (WithMaxKeys) never meets: should it, the entry is
			// dropped and counted as evicted, and the bound holds.
			sh.forget(id)
			sh.evicted++
			sh.n--
			return
		}
	}
}

// sizeFor returns the table size for n entries below the cap: the fewest
// buckets on the shard's ladder (full, full/2, full/4, ... rounded up) that
// hold n. Growing and shrinking along one ladder means a shard that fills up
// ends at exactly full buckets.
func (sh *shardData) sizeFor(n int) int {
	nb := sh.full
	for {
		half := (nb + 1) / 2
		if half == nb || capacity(half) < n {
			return nb
		}
		nb = half
	}
}

// grown returns the next size up the ladder from nb buckets (full at most).
func (sh *shardData) grown(nb int) int {
	l := sh.full
	for half := (l + 1) / 2; half > nb && half != l; half = (l + 1) / 2 {
		l = half
	}
	return l
}

// resize moves every live entry into a fresh table of nb buckets (>= what
// they need), dropping the expired ones. It is the one step that visits a
// whole shard; it runs only when the entry count has doubled or fallen to a
// quarter since the last resize, so it costs O(1) per insertion or removal,
// amortised, and never runs on a shard that stays at its cap.
func (sh *shardData) resize(nb int, now int64) {
	ids, ents := sh.ids, sh.ents
	sh.ids, sh.ents = newTable(nb)
	sh.n, sh.sweep, sh.passMin = 0, 0, math.MaxInt64 // a new pass
	for i, id := range ids {
		switch e := &ents[i]; {
		case id == 0:
		case e.exp() <= now:
			sh.forget(id)
			sh.reclaimed++
		default:
			sh.settle(id, *e, now, nil)
			sh.n++
		}
	}
}

// newTable returns the ids and entries of a table of nb buckets, free. Both
// are one allocation, the ids first: a table above 32 KiB takes whole pages,
// and one rounding up wastes half what two would. The ids take whole
// entries (a bucket's 8 ids the room of 2), so both start on a cache line.
func newTable(nb int) ([]uint64, []entry) {
	const idsPerEntry = int(unsafe.Sizeof(entry{}) / unsafe.Sizeof(uint64(0)))
	idEnts := nb * bucketSlots / idsPerEntry
	buf := make([]entry, idEnts+nb*bucketSlots)
	// entry holds no pointer: its memory may be read as uint64s.
	ids := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(buf))), nb*bucketSlots)
	return ids[:len(ids):len(ids)], buf[idEnts:]
}

// evict removes one entry to make room for id at the cap: from the (up to
// 16) entries of id's two buckets, a sample no client can choose since ids
// are keyed hashes, the first expired one, else the one with the highest
// score (closest to a whole quota), the soonest to expire among equals.
// Entries whose id is in keep are never chosen; when id's buckets hold no
// other entry (a tiny table), the candidates are the first entries from
// there on.
//
// It reports whether it removed an entry.
func (sh *shardData) evict(id uint64, now int64, keep []uint64) bool {
	nb := len(sh.ids) / bucketSlots
	b1, b2 := buckets(id, nb)
	best, bestScore, bestExp := -1, int64(-1), int64(0)
	consider := func(i int) bool {
		if sh.ids[i] == 0 || kept(sh.ids[i], keep) {
			return false
		}
		e := &sh.ents[i]
		exp := e.exp()
		if exp <= now {
			best, bestScore = i, 256 // expired: nothing to compare
			return true
		}
		if sc := e.score(); sc > bestScore || sc == bestScore && exp < bestExp {
			best, bestScore, bestExp = i, sc, exp
		}
		return false
	}
	done := false
	for j := 0; j < bucketSlots && !done; j++ {
		done = consider(b1*bucketSlots + j)
	}
	for j := 0; j < bucketSlots && !done && b2 != b1; j++ {
		done = consider(b2*bucketSlots + j)
	}
	for i, k := b1*bucketSlots, 0; k < len(sh.ids) && best < 0; i, k = i+1, k+1 {
		if i == len(sh.ids) {
			i = 0
		}
		consider(i)
	}
	if best < 0 {
		return false // everything held is in keep
	}
	if bestScore == 256 {
		sh.reclaimed++
	} else {
		sh.evicted++
	}
	sh.forget(sh.ids[best])
	sh.clearSlot(best)
	sh.n--
	return true
}

func kept(id uint64, keep []uint64) bool {
	for _, k := range keep {
		if k == id {
			return true
		}
	}
	return false
}

// sweepSome looks at up to k slots from the sweep cursor on and removes the
// expired entries, then shrinks the table when it has become mostly empty
// (and drops it when empty). Before due nothing can have expired, and it
// looks at nothing: a store whose entries are all live pays no sweep.
func (sh *shardData) sweepSome(now int64, k int) {
	n := len(sh.ids)
	if n == 0 || now < sh.due.Load() {
		return
	}
	i := sh.sweep
	for ; k > 0; k-- {
		if i >= n { // a pass ends: it has seen every entry
			i = 0
			sh.due.Store(sh.passMin)
			sh.passMin = math.MaxInt64
			if now < sh.due.Load() {
				break
			}
		}
		if id := sh.ids[i]; id != 0 {
			if exp := sh.ents[i].exp(); exp <= now {
				sh.forget(id)
				sh.clearSlot(i)
				sh.n--
				sh.reclaimed++
			} else {
				sh.passMin = min(sh.passMin, exp)
			}
		}
		i++
	}
	sh.sweep = i
	switch nb := n / bucketSlots; {
	case sh.n == 0 && nb > 1:
		sh.ids, sh.ents, sh.sweep = nil, nil, 0
		sh.due.Store(math.MaxInt64)
		sh.passMin = math.MaxInt64
	case sh.n < capacity(nb)/4:
		if l := sh.sizeFor(2 * sh.n); l < nb {
			sh.resize(l, now)
		}
	}
}
