package memstore

import (
	"math/bits"
	"sync"
	"unsafe"

	limit "github.com/quotagate/quotagate/engine"
)

// A shard's table is a flat open-addressing hash table with linear probing
// and Robin Hood placement (an entry never sits further from its home slot
// than the entries it passed), deleted by backward shifting, so it needs no
// tombstones and never degrades. It holds no pointers: the garbage collector
// never scans it, and an entry costs its 40 bytes and nothing else:
//
//	heads[i] 16 B  the key's 64-bit keyed hash (its identity; 0 marks a free
//	               slot) and a meta word (expiry, algorithm, eviction score)
//	words[i] 24 B  the state: three words
//
// The halves are separate arrays: probing, eviction and sweeping read only
// heads, 4 to a cache line; a decision reads one entry's words.
// The home slot of an id is fastrange(id, len): the high bits of id*len, so
// any table length works and the length at the cap is exactly what MaxKeys
// needs at the maximum load factor.

// Load factor bounds: a table grows (to about twice its length) before an
// insertion would take it above loadNum/loadDen, and shrinks (to about half)
// when a sweep leaves it below a quarter of that.
const (
	loadNum = 7
	loadDen = 8
	// minLen is the smallest table length (two cache lines of heads), unless the
	// cap needs fewer.
	minLen = 8
)

// evictSample is how many entries an eviction compares; see the package doc
// for what it guarantees.
const evictSample = 16

// Incremental sweeping: every sweepEvery-th decision of a shard sweeps
// sweepSlots consecutive slots of one shard, taking the 64 shards in turn, so
// that 8 slots are swept per decision on average and a quiet shard is swept
// by its neighbours' traffic.
const (
	sweepEvery = 1
	sweepSlots = 8
)

// head is the hot half of an entry, read by probing, eviction and sweeping.
type head struct {
	// id is the key's 64-bit keyed hash; 0 marks a free slot.
	id uint64
	// meta packs exp<<metaExpShift | algorithm<<8 | score: exp is the Unix ms
	// at which the entry is dead (clamped to ±2^53), the algorithm is the one
	// that wrote the state, score (0..255) is the remaining fraction of the
	// quota recorded at the last decision, 255 = whole.
	meta int64
}

// words is the cold half of an entry, the State: window algorithms Window,
// Count, Prev; TokenBucket TAT.
type words [3]int64

const (
	metaExpShift = 10
	maxExp       = 1<<53 - 1
	minExp       = -(1 << 53)
)

func (h *head) exp() int64 { return h.meta >> metaExpShift }

func (h *head) score() int64 { return h.meta & 255 }

// holds reports whether h is live and was written by algorithm a.
func (h *head) holds(a limit.Algorithm, now int64) bool {
	return h.exp() > now && limit.Algorithm(h.meta>>8&3) == a
}

// unpack returns the State of algorithm a held in w.
func unpack(a limit.Algorithm, w *words) limit.State {
	if a == limit.TokenBucket {
		return limit.State{TAT: w[0]}
	}
	return limit.State{Window: w[0], Count: w[1], Prev: w[2]}
}

// pack returns the words holding st, a State of algorithm a.
func pack(a limit.Algorithm, st limit.State) words {
	if a == limit.TokenBucket {
		return words{st.TAT}
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
func (h *head) setScore(remaining, capacity int64) {
	h.meta = h.meta&^255 | scoreOf(remaining, capacity)
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
	return remaining * 255 / capacity // remaining < capacity <= 2^53/4: no overflow
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
	mu    sync.Mutex
	heads []head  // ids and metas; len is the table length
	words []words // states, parallel to heads
	n     int     // entries held
	max   int     // entries at most (MaxKeys' share)
	full  int     // table length at the cap: the smallest that holds max
	// sweep is the next slot the incremental sweep looks at.
	sweep int
	// ticks counts decisions, to schedule sweeps.
	ticks uint32
	// reclaimed counts expired entries removed; evicted counts live entries
	// removed to make room at the cap.
	reclaimed, evicted uint64
}

func newShard(max int) shardData {
	return shardData{max: max, full: lenFor(max)}
}

// capacity is the most entries a table of length n holds.
func capacity(n int) int { return n * loadNum / loadDen }

// lenFor is the smallest table length that holds n entries.
func lenFor(n int) int { return (n*loadDen + loadNum - 1) / loadNum }

// home is the slot id probes from in a table of length n.
func home(id uint64, n int) int {
	hi, _ := bits.Mul64(id, uint64(n))
	return int(hi)
}

// dist is how far slot i is from the home of id (wrapping).
func (sh *shardData) dist(id uint64, i int) int {
	d := i - home(id, len(sh.heads))
	if d < 0 {
		d += len(sh.heads)
	}
	return d
}

// find returns the slot holding id, or -1.
func (sh *shardData) find(id uint64) int {
	n := len(sh.heads)
	if n == 0 {
		return -1
	}
	i := home(id, n)
	for d := 0; ; d++ {
		x := sh.heads[i].id
		if x == id {
			return i
		}
		// Robin Hood: id would have displaced an entry closer to its home
		// than id is to its own. The table always has a free slot, so this
		// loop ends.
		if x == 0 || sh.dist(x, i) < d {
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// put inserts h (its id absent) with its state w into a table with a free
// slot.
func (sh *shardData) put(h head, w words) {
	n := len(sh.heads)
	i := home(h.id, n)
	for d := 0; ; d++ {
		x := sh.heads[i].id
		if x == 0 {
			sh.heads[i], sh.words[i] = h, w
			sh.n++
			return
		}
		if dx := sh.dist(x, i); dx < d {
			// take the slot from the entry nearer its home; carry it on
			sh.heads[i], h = h, sh.heads[i]
			sh.words[i], w = w, sh.words[i]
			d = dx
		}
		if i++; i == n {
			i = 0
		}
	}
}

// del removes the entry in slot i, shifting the entries after it that are
// not in their home slot back by one.
func (sh *shardData) del(i int) {
	n := len(sh.heads)
	for {
		j := i + 1
		if j == n {
			j = 0
		}
		x := sh.heads[j].id
		if x == 0 || home(x, n) == j {
			sh.heads[i], sh.words[i] = head{}, words{}
			sh.n--
			return
		}
		sh.heads[i], sh.words[i] = sh.heads[j], sh.words[j]
		i = j
	}
}

// add inserts h (its id absent) with its state w, making room first: at the
// cap it evicts one entry (never one whose id is in keep), below it the table
// grows when it must.
func (sh *shardData) add(h head, w words, now int64, keep []uint64) {
	switch {
	case sh.n >= sh.max:
		sh.evict(h.id, now, keep)
	case sh.n+1 > capacity(len(sh.heads)):
		sh.resize(sh.lenFor(sh.n+1), now)
	}
	sh.put(h, w)
}

// lenFor returns the table length for n entries below the cap: the smallest
// length of the shard's ladder (full, full/2, full/4, ... rounded up, but not
// below minLen) that holds n. Growing and shrinking along one ladder means a
// shard that fills up ends at exactly full slots.
func (sh *shardData) lenFor(n int) int {
	l := sh.full
	for {
		half := (l + 1) / 2
		if half < minLen || capacity(half) < n {
			return l
		}
		l = half
	}
}

// resize moves every live entry into a fresh table of length l (>= what they
// need), dropping the expired ones. It is the one step that visits a whole
// shard; it runs only when the entry count has doubled or fallen to a
// quarter since the last resize, so it costs O(1) per insertion or removal,
// amortised, and never runs on a shard that stays at its cap.
func (sh *shardData) resize(l int, now int64) {
	heads, ws := sh.heads, sh.words
	sh.heads, sh.words = make([]head, l), make([]words, l)
	sh.n, sh.sweep = 0, 0
	for i := range heads {
		switch h := &heads[i]; {
		case h.id == 0:
		case h.exp() <= now:
			sh.reclaimed++
		default:
			sh.put(*h, ws[i])
		}
	}
}

// evict removes one entry to make room for id at the cap. It looks at the
// entries from id's home slot on (their ids are keyed hashes, so this is a
// sample no client can choose) and removes the first expired one it meets,
// else, of the first evictSample, the one with the highest score (closest to
// a whole quota), the soonest to expire among equals.
func (sh *shardData) evict(id uint64, now int64, keep []uint64) {
	n := len(sh.heads)
	i := home(id, n)
	best, bestScore, bestExp := -1, int64(-1), int64(0)
	for seen, scanned := 0, 0; seen < evictSample && scanned < n; scanned++ {
		if h := &sh.heads[i]; h.id != 0 && !kept(h.id, keep) {
			exp := h.exp()
			if exp <= now {
				sh.del(i)
				sh.reclaimed++
				return
			}
			if sc := h.score(); sc > bestScore || sc == bestScore && exp < bestExp {
				best, bestScore, bestExp = i, sc, exp
			}
			seen++
		}
		if i++; i == n {
			i = 0
		}
	}
	if best >= 0 {
		sh.del(best)
		sh.evicted++
	}
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
// expired entries, then shrinks the table when it has become mostly empty.
func (sh *shardData) sweepSome(now int64, k int) {
	n := len(sh.heads)
	if sh.n == 0 {
		if n > minLen {
			sh.heads, sh.words, sh.sweep = nil, nil, 0 // an idle shard holds nothing
		}
		return
	}
	i := sh.sweep
	if i >= n {
		i = 0
	}
	for ; k > 0; k-- {
		if h := &sh.heads[i]; h.id != 0 && h.exp() <= now {
			sh.del(i)
			sh.reclaimed++
			continue // del moved the next entry into slot i: look again
		}
		if i++; i == n {
			i = 0
		}
	}
	sh.sweep = i
	if n > minLen && sh.n < capacity(n)/4 {
		if l := sh.lenFor(2 * sh.n); l < n {
			sh.resize(l, now)
		}
	}
}
