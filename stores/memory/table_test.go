package memstore

import (
	"context"
	"github.com/quotagate/quotagate/engine/limittest"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// hashTag follows Redis Cluster: the bytes between the first '{' and the
// next '}' when there is at least one, else the whole key.
func TestHashTag(t *testing.T) {
	for _, c := range []struct{ key, tag string }{
		{"qg:{abc}:b:f:r:x", "abc"},
		{"qg:{abc}:/v1/{id}:f", "abc"},
		{"{a}{b}", "a"},
		{"a}b{c}", "c"},
		{"qg:{}:{x}", "qg:{}:{x}"},
		{"qg:{abc", "qg:{abc"},
		{"no-tag", "no-tag"},
		{"", ""},
	} {
		if got := string(hashTag([]byte(c.key))); got != c.tag {
			t.Errorf("hashTag(%q) = %q, want %q", c.key, got, c.tag)
		}
	}
}

// check verifies a shard's invariants: n counts the occupied slots, no id
// twice, every entry in one of its two buckets with its own payload (words[0]
// is its id in these tests), the table on its ladder and never above the
// cap's length, the cap held.
func check(t *testing.T, sh *shardData) {
	t.Helper()
	nb := len(sh.ids) / bucketSlots
	if len(sh.ids) != nb*bucketSlots || len(sh.ents) != len(sh.ids) {
		t.Fatalf("table of %d ids, %d entries: not whole buckets", len(sh.ids), len(sh.ents))
	}
	if nb > sh.full {
		t.Fatalf("%d buckets, the cap needs %d", nb, sh.full)
	}
	seen := make(map[uint64]bool, sh.n)
	due := sh.due.Load()
	for i, id := range sh.ids {
		if id != 0 && sh.ents[i].exp() < due {
			t.Fatalf("slot %d expires at %d, before due %d: the sweep would skip it", i, sh.ents[i].exp(), due)
		}
		if id == 0 {
			if sh.ents[i] != (entry{}) {
				t.Fatalf("free slot %d holds entry %v", i, sh.ents[i])
			}
			continue
		}
		if seen[id] {
			t.Fatalf("id %x held twice", id)
		}
		seen[id] = true
		if b1, b2 := buckets(id, nb); i/bucketSlots != b1 && i/bucketSlots != b2 {
			t.Fatalf("id %x in bucket %d, its buckets are %d and %d", id, i/bucketSlots, b1, b2)
		}
		if sh.ents[i].w[0] != int64(id>>1) {
			t.Fatalf("id %x carries the words of another entry", id)
		}
		if sh.find(id) != i {
			t.Fatalf("find(%x) = %d, held in slot %d", id, sh.find(id), i)
		}
	}
	if len(seen) != sh.n || sh.n > sh.max {
		t.Fatalf("%d entries held, n = %d, max %d", len(seen), sh.n, sh.max)
	}
	for id := range sh.epochs {
		if !seen[id] {
			t.Fatalf("epoch kept for id %x, which no entry holds", id)
		}
	}
}

// The table against a model under random insertions, updates, lookups,
// clock steps and sweeps, for caps from 1 to 4 096 entries: nothing is lost
// but what eviction and expiry remove (and both are counted), nothing is
// found that was not put, and the cap holds.
func TestTableMatchesModel(t *testing.T) {
	for _, max := range []int{1, 2, 7, 16, 100, 4096} {
		rng := rand.New(rand.NewPCG(uint64(max), 42))
		sh := newShard(max)
		type held struct{ exp int64 }
		model := map[uint64]held{}
		ids := make([]uint64, 0, 4*max+16)
		for range cap(ids) {
			ids = append(ids, rng.Uint64()|1)
		}
		now := int64(1_000)
		added, liveGone := uint64(0), uint64(0)
		for step := range 50_000 {
			id := ids[rng.IntN(len(ids))]
			switch r := rng.IntN(100); {
			case r < 50: // a decision writing id
				exp := now + 1 + rng.Int64N(2_000)
				meta := packMeta(limit.FixedWindow, exp, rng.Int64N(4), 3)
				if i := sh.find(id); i >= 0 {
					sh.set(i, id, entry{meta, sh.ents[i].w})
				} else {
					sh.add(id, entry{meta, words{int64(id >> 1)}}, now, nil)
					added++
				}
				model[id] = held{exp}
			case r < 80: // a lookup
				i := sh.find(id)
				if _, ok := model[id]; !ok && i >= 0 {
					t.Fatalf("max %d step %d: found %x, never put or already gone", max, step, id)
				}
				if e, ok := model[id]; ok && i < 0 {
					if e.exp > now {
						liveGone++ // only eviction may remove a live entry
					}
					delete(model, id)
				}
			case r < 90:
				now += rng.Int64N(300)
			default:
				sh.sweepSome(now, sweepSlots)
			}
			if step%997 == 0 {
				check(t, sh)
			}
		}
		check(t, sh)
		if liveGone > sh.evicted {
			t.Fatalf("max %d: %d live entries gone, %d evicted", max, liveGone, sh.evicted)
		}
		if got := sh.evicted + sh.reclaimed + uint64(sh.n); got != added {
			t.Fatalf("max %d: %d added, %d held + %d evicted + %d reclaimed", max, added, sh.n, sh.evicted, sh.reclaimed)
		}
	}
}

// At the cap, an insertion evicts from the new key's two buckets the entry
// with the highest score (the soonest to expire among equals), or an
// expired one first, and places the new key in its buckets: the table is
// neither resized nor otherwise changed (no kick).
func TestEvictionPicksTheEntryClosestToWhole(t *testing.T) {
	const max = 4096
	rng := rand.New(rand.NewPCG(7, 7))
	sh := newShard(max)
	now := int64(1_000)
	for sh.n < max {
		sh.add(rng.Uint64()|1, entry{meta: packMeta(limit.FixedWindow, now+1+rng.Int64N(1000), rng.Int64N(4), 3)}, now, nil)
	}
	ids := sh.ids
	for range 2000 {
		id := rng.Uint64() | 1
		nb := len(sh.ids) / bucketSlots
		b1, b2 := buckets(id, nb)
		before := slotsOf(sh)
		var want slot // the candidate eviction must pick
		for _, b := range []int{b1, b2} {
			for _, h := range before[b*bucketSlots : b*bucketSlots+bucketSlots] {
				switch {
				case h.id == 0:
				case want.id != 0 && want.exp() <= now:
				case h.exp() <= now:
					want = h
				case h.score() > want.score() || want.id == 0 || h.score() == want.score() && h.exp() < want.exp():
					want = h
				}
			}
		}
		sh.add(id, entry{meta: packMeta(limit.FixedWindow, now+500, 2, 3)}, now, nil)
		if &sh.ids[0] != &ids[0] {
			t.Fatal("the table was reallocated at the cap")
		}
		// the victim's slot now holds the new key, or is free and the new
		// key took a slot that was free in its buckets, or holds the entry
		// that gave the new key its home slot (an entry away from its own
		// home); nothing else moved
		changed := 0
		after := slotsOf(sh)
		for i := range before {
			if before[i] == after[i] {
				continue
			}
			changed++
			b := i / bucketSlots
			h := home(id, b)
			gaveHome := (b == b1 || b == b2) && after[h].id == id && before[h].id != 0 && home(before[h].id, b) != h
			switch {
			case before[i] == want && (after[i].id == id || after[i].id == 0):
			case before[i].id == 0 && after[i].id == id && (b == b1 || b == b2):
			case i == h && gaveHome:
			case (before[i] == want || before[i].id == 0) && gaveHome && after[i] == before[h]:
			default:
				t.Fatalf("slot %d: %x replaced by %x; the victim is %x, the new key %x", i, before[i].id, after[i].id, want.id, id)
			}
		}
		if changed == 0 || changed > 3 || sh.find(id) < 0 || sh.find(want.id) >= 0 {
			t.Fatalf("%d slots changed by one insertion at the cap; new key found: %v, victim found: %v", changed, sh.find(id) >= 0, sh.find(want.id) >= 0)
		}
		now += rng.Int64N(3)
	}
}

// Engine + memory store at the default MaxKeys, 1 000 000 decisions
// for distinct identities, the clock advancing 0.25 ms per decision: the
// cost per decision at the cap stayed far above the cost below it (a whole
// shard swept per insertion). BenchmarkFullStoreCost measures it; this
// test pins the structure that keeps it flat: once full, a shard's table is
// never reallocated or resized, it stays at its cap, and the sweep and
// eviction keep the store at exactly MaxKeys. It drives Take directly (the
// engine's part does not change at the cap), 1 000 000 times.
func TestFullStoreStaysFlat(t *testing.T) {
	clock := epochUS
	s, err := New(WithClock(func() time.Time { return time.UnixMilli(0).Add(time.Duration(clock) * time.Microsecond) }))
	if err != nil {
		t.Fatal(err)
	}
	op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: limit.SlidingWindow, Limit: 100, WindowMS: 60_000}}}
	key := make([]byte, 0, 64)
	var tables [shardCount]*uint64
	for i := range 1_000_000 {
		clock += 250 // µs
		key = strconv.AppendInt(append(key[:0], "qg:{"...), int64(i), 16)
		op.Quotas[0].Key = append(key, "}:100p60:s:r:k=client"...)
		if res, _ := limittest.Take(context.Background(), s, &op); !res.Allowed {
			t.Fatalf("decision %d: a new identity was denied", i)
		}
		if i == 2*DefaultMaxKeys {
			// full but for the entries that expired since (2 minutes at most)
			if n := s.Len(); n < DefaultMaxKeys*99/100 {
				t.Fatalf("Len %d after %d new identities, want about the cap %d", n, i+1, DefaultMaxKeys)
			}
			for j := range s.shards {
				sh := &s.shards[j]
				if len(sh.ids) != sh.full*bucketSlots {
					t.Fatalf("shard %d at its cap has %d slots, want %d", j, len(sh.ids), sh.full*bucketSlots)
				}
				tables[j] = unsafe.SliceData(sh.ids)
			}
		}
	}
	for j := range s.shards {
		if unsafe.SliceData(s.shards[j].ids) != tables[j] {
			t.Fatalf("shard %d: its table was reallocated at the cap", j)
		}
	}
	if n := s.Len(); n < DefaultMaxKeys*99/100 {
		t.Fatalf("Len %d, want about the cap %d", n, DefaultMaxKeys)
	}
	if _, live := s.Evictions(); live == 0 {
		t.Fatal("no live eviction: the flood never met the cap")
	}
}

// epochUS is 2026-03-01T12:00:00Z in µs.
const epochUS = 1_772_366_400_000_000

// When cuckoo kicks find no free slot (every id crafted here has its two
// buckets among buckets 0 and 1 of a 3-bucket table, so 16 of them fill
// both), the table grows if it is below its size for the cap, and only at
// that size evicts an entry, counted as such: nothing is lost silently and
// the loop ends.
func TestKicksRunningOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	var ids []uint64
	for len(ids) < 17 {
		id := rng.Uint64() | 1
		if b1, b2 := buckets(id, 3); b1 < 2 && b2 < 2 {
			ids = append(ids, id)
		}
	}
	now := int64(1_000)
	for _, c := range []struct {
		max         int
		wantBuckets int
		wantEvicted uint64
		wantN       int
	}{
		{max: 20, wantBuckets: 3, wantEvicted: 1, wantN: 16}, // 3 buckets is its size for the cap
		{max: 40, wantBuckets: 6, wantEvicted: 0, wantN: 17}, // grows to 6
	} {
		sh := newShard(c.max)
		for _, id := range ids[:16] {
			sh.add(id, entry{packMeta(limit.FixedWindow, now+100, 1, 3), words{int64(id >> 1)}}, now, nil)
		}
		if nb := len(sh.ids) / bucketSlots; nb != 3 {
			t.Fatalf("max %d: %d buckets for 16 entries, want 3", c.max, nb)
		}
		sh.add(ids[16], entry{packMeta(limit.FixedWindow, now+100, 1, 3), words{int64(ids[16] >> 1)}}, now, nil)
		check(t, sh)
		if nb := len(sh.ids) / bucketSlots; nb != c.wantBuckets || sh.evicted != c.wantEvicted || sh.n != c.wantN {
			t.Fatalf("max %d: %d buckets, %d evicted, %d held; want %d, %d, %d", c.max, nb, sh.evicted, sh.n, c.wantBuckets, c.wantEvicted, c.wantN)
		}
	}
}

// The sweep looks at no slot while every entry held is live (due: the
// earliest expiry is still ahead), and once one may have expired, a whole
// pass reclaims every expired entry: those it saw, and those rewritten to
// expire sooner behind its cursor while it ran.
func TestSweepSkipsUntilAnEntryMayHaveExpired(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	sh := newShard(4096)
	now := int64(1_000)
	put := func(exp int64) {
		id := rng.Uint64() | 1
		sh.add(id, entry{packMeta(limit.FixedWindow, exp, 1, 3), words{int64(id >> 1)}}, now, nil)
	}
	for i := range 3000 {
		if i%2 == 0 {
			put(now + 1_000 + rng.Int64N(1_000))
		} else {
			put(now + 100_000)
		}
	}
	for range 10_000 {
		sh.sweepSome(now, sweepSlots)
	}
	if sh.sweep != 0 || sh.reclaimed != 0 {
		t.Fatalf("cursor %d, %d reclaimed: the sweep ran while every entry was live", sh.sweep, sh.reclaimed)
	}
	now += 2_000 // the first half has expired: a pass starts
	for sh.sweep < len(sh.ids)/2 {
		sh.sweepSome(now, sweepSlots)
	}
	// Behind the cursor: entries rewritten to expire soon.
	for j := 0; j < sh.sweep; j += 17 {
		if sh.ids[j] != 0 {
			sh.ents[j].meta = packMeta(limit.FixedWindow, now+1+rng.Int64N(50), 1, 3)
			sh.wrote(sh.ents[j].exp())
		}
	}
	for range len(sh.ids) / sweepSlots { // the pass ends
		sh.sweepSome(now, sweepSlots)
	}
	now += 100 // the short-lived entries have expired
	for range 2*len(sh.ids)/sweepSlots + 1 {
		sh.sweepSome(now, sweepSlots)
	}
	check(t, sh)
	for i, id := range sh.ids {
		if id != 0 && sh.ents[i].exp() <= now {
			t.Fatalf("slot %d: expired at %d, now %d, two passes later", i, sh.ents[i].exp(), now)
		}
	}
	if want := uint64(1500); sh.reclaimed < want {
		t.Fatalf("%d reclaimed, want at least %d", sh.reclaimed, want)
	}
}

// Placing an entry, in its home slot, by moving another out of it or by
// a kick, lowers due to the entry's expiry and no further: filled to
// nearly its load bound with live entries, a shard's due is exactly the
// earliest expiry it holds after every insertion (a free home slot taken
// records no expiry of its own), and a sweep step looks at nothing.
func TestPlacingEntriesKeepsDueAtTheEarliestExpiry(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	sh := newShard(4096)
	now := int64(1_000)
	least := int64(math.MaxInt64)
	for i := range 4096 {
		// Each of the last entries, placed at the highest loads (where
		// kicks place them), expires before every entry held.
		exp := now + 100_000 + rng.Int64N(100_000)
		if i >= 3900 {
			exp = now + 100_000 - int64(i)
		}
		least = min(least, exp)
		id := rng.Uint64() | 1
		sh.add(id, entry{packMeta(limit.FixedWindow, exp, 1, 3), words{int64(id >> 1)}}, now, nil)
		if got := sh.due.Load(); got != least {
			t.Fatalf("entry %d: due %d, the earliest expiry held is %d", i, got, least)
		}
	}
	check(t, sh)
	sh.sweepSome(now, sweepSlots)
	if sh.sweep != 0 {
		t.Fatalf("cursor at %d: a sweep step looked at slots while every entry was live", sh.sweep)
	}
}

// A Peek writes nothing, the eviction score included: a peeked entry is
// no less likely to be evicted than before (it used to be ranked as if the
// peeked request had been admitted, which shielded it). Both the one-quota
// and the several-quota paths.
func TestPeekLeavesTheEvictionScore(t *testing.T) {
	ctx := context.Background()
	s, err := New(WithClock(func() time.Time { return time.UnixMilli(1_767_225_600_000) }))
	if err != nil {
		t.Fatal(err)
	}
	meta := func(key []byte) int64 {
		sh := &s.shards[s.shardOf(hashTag(key))]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		p := sh.find(s.keyID(key))
		if p < 0 {
			t.Fatalf("%s: no entry", key)
		}
		return sh.ents[p].meta
	}
	for _, c := range []struct {
		n     int
		block bool // a blocking policy's Op: the store's block path
	}{{1, false}, {2, false}, {1, true}, {2, true}} {
		n := c.n
		op := &limitstore.Op{Cost: 1, N: n}
		tag := "{u" + strconv.Itoa(n) + strconv.FormatBool(c.block) + "}"
		for i := range n {
			op.Quotas[i] = limitstore.Quota{Key: []byte("t:" + tag + ":q" + strconv.Itoa(i)), Algorithm: limit.FixedWindow, Limit: 4, WindowMS: 60_000}
		}
		if c.block {
			op.Block = limitstore.Block{Key: []byte("t:" + tag + ":b"), ForMS: 60_000}
		}
		if _, err := limittest.Take(ctx, s, op); err != nil {
			t.Fatal(err)
		}
		before := meta(op.Quotas[0].Key)
		peek := *op
		peek.Peek = true
		if _, err := limittest.Take(ctx, s, &peek); err != nil {
			t.Fatal(err)
		}
		if after := meta(op.Quotas[0].Key); after != before {
			t.Errorf("%d quotas, blocking %v: Peek changed the entry's meta %x -> %x (eviction score %d -> %d)", n, c.block, before, after, before&255, after&255)
		}
	}
}

// TestEpochsLeaveWithTheirEntries: the epoch a Reset records for a live
// entry is kept while the entry holds that State and leaves with it: swept
// once expired, evicted at the cap, or replaced by a State decided on none;
// so the map never holds more than the entries reset.
func TestEpochsLeaveWithTheirEntries(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_767_225_600_000)
	s, err := New(WithClock(func() time.Time { return now }), WithMaxKeys(384))
	if err != nil {
		t.Fatal(err)
	}
	op := func(i int) *limitstore.Op {
		o := &limitstore.Op{Cost: 1, N: 1}
		o.Quotas[0] = limitstore.Quota{Key: []byte("t:{" + strconv.Itoa(i) + "}:b:f:r:x"), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 60_000}
		return o
	}
	held := func() (n int) {
		for i := range s.shards {
			n += len(s.shards[i].epochs)
		}
		return n
	}
	for i := range 8 {
		if _, err := limittest.Take(ctx, s, op(i)); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(ctx, [][]byte{op(i).Quotas[0].Key}); err != nil {
			t.Fatal(err)
		}
	}
	if n := held(); n != 8 {
		t.Fatalf("%d epochs held after 8 Resets of live entries, want 8", n)
	}
	if res, _ := limittest.Take(ctx, s, op(0)); res.Quotas[0].Epoch != 1 {
		t.Fatalf("a Take after the Reset: %+v, want epoch 1", res.Quotas[0])
	}
	now = now.Add(2 * time.Minute) // every entry expired
	if res, _ := limittest.Take(ctx, s, op(1)); res.Quotas[0].Epoch != 0 {
		t.Fatalf("a Take on an expired reset entry: %+v, want epoch 0", res.Quotas[0])
	}
	for i := range s.shards {
		s.shards[i].mu.Lock()
		s.shards[i].sweepSome(now.UnixMilli(), len(s.shards[i].ids)+1)
		s.shards[i].mu.Unlock()
	}
	if n := held(); n != 0 {
		t.Fatalf("%d epochs held once their entries expired and were swept, want 0", n)
	}
	// At the cap: the reset entries are evicted (a whole quota ranks
	// first), and their epochs with them.
	for i := range 8 {
		if _, err := limittest.Take(ctx, s, op(i)); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(ctx, [][]byte{op(i).Quotas[0].Key}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 8; i < 20_000; i++ {
		if _, err := limittest.Take(ctx, s, op(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := held(); n != 0 {
		t.Fatalf("%d epochs held after their entries were evicted, want 0", n)
	}
}

// slot is one slot of a table: its id and its entry.
type slot struct {
	id uint64
	entry
}

// slotsOf returns a copy of sh's slots.
func slotsOf(sh *shardData) []slot {
	ss := make([]slot, len(sh.ids))
	for i := range ss {
		ss[i] = slot{sh.ids[i], sh.ents[i]}
	}
	return ss
}

// Most entries sit in their home slot of their first bucket, where find
// looks first: for them the entry's slot is known before the bucket's ids
// are read.
func TestMostEntriesSitInTheirHomeSlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	sh := newShard(1 << 20)
	now := int64(1_000)
	for _, n := range []int{1_000, 10_000, 100_000} {
		for sh.n < n {
			sh.add(rng.Uint64()|1, entry{meta: packMeta(limit.FixedWindow, now+1_000_000, 1, 3)}, now, nil)
		}
		nb, atHome := len(sh.ids)/bucketSlots, 0
		for i, id := range sh.ids {
			if b1, _ := buckets(id, nb); id != 0 && i == home(id, b1) {
				atHome++
			}
		}
		load := float64(sh.n) / float64(len(sh.ids))
		t.Logf("%d entries, load %.2f: %.1f%% at home", sh.n, load, 100*float64(atHome)/float64(sh.n))
		if float64(atHome) < 0.5*float64(sh.n) {
			t.Errorf("%d entries (load %.2f): %d at home, want at least half", sh.n, load, atHome)
		}
	}
}

// A resize drops the expired entries it meets, and their epochs with them:
// an entry reset, expired and then dropped by the table's growth leaves no
// epoch behind, so its key comes back of epoch 0.
func TestEpochsLeaveWithTheEntriesAResizeDrops(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_767_225_600_000)
	s, err := New(WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	op := func(name string, windowMS int64) *limitstore.Op {
		o := &limitstore.Op{Cost: 1, N: 1}
		o.Quotas[0] = limitstore.Quota{Key: []byte("t:{one}:b:f:r:" + name), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: windowMS}
		return o
	}
	take := func(o *limitstore.Op) limitstore.Result {
		t.Helper()
		res, err := limittest.Take(ctx, s, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	sh := &s.shards[s.shardOf([]byte("one"))].shardData
	take(op("reset", 1000))
	if err := s.Reset(ctx, [][]byte{op("reset", 1000).Quotas[0].Key}); err != nil {
		t.Fatal(err)
	}
	for i := 0; sh.n < capacity(len(sh.ids)/bucketSlots); i++ { // the table full, of live entries but one
		take(op("live"+strconv.Itoa(i), 3_600_000))
	}
	size := len(sh.ids)
	now = now.Add(5 * time.Second) // the reset entry has expired
	take(op("grow", 3_600_000))
	if len(sh.ids) == size {
		t.Fatalf("the table kept its %d slots: no resize", size)
	}
	if len(sh.epochs) != 0 {
		t.Errorf("%d epochs kept after the resize dropped the one reset entry, want none", len(sh.epochs))
	}
	if got := take(op("reset", 1000)).Quotas[0].Epoch; got != 0 {
		t.Errorf("the reset key back after its entry expired: epoch %d, want 0", got)
	}
}
