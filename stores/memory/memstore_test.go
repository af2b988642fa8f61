package memstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newStore(t testing.TB, opts ...memstore.Option) (*memstore.Store, *limittest.Clock) {
	t.Helper()
	clock := limittest.NewClock(epoch)
	s, err := memstore.New(append([]memstore.Option{memstore.WithClock(clock.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

// evictions is Store.Evictions as a value that prints with its names.
type evictions struct{ Expired, Live uint64 }

func evictionsOf(s *memstore.Store) evictions {
	e, l := s.Evictions()
	return evictions{e, l}
}

func peer(i int) string { return fmt.Sprintf("10.%d.%d.%d:4242", i>>16&255, i>>8&255, i&255) }

func TestOptionsAreValidated(t *testing.T) {
	if _, err := memstore.New(memstore.WithMaxKeys(0)); err == nil {
		t.Fatal("WithMaxKeys(0): want an error")
	}
	if _, err := memstore.New(memstore.WithClock(nil)); err == nil {
		t.Fatal("WithClock(nil): want an error")
	}
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(640))
	l := limittest.MustNew(s, limit.Policy{Limit: 5, Window: time.Minute})
	for i := 0; i < 20_000; i++ {
		l.Check(context.Background(), limit.Request{Peer: peer(i)}, limittest.NewWriter())
	}
	if n := s.Len(); n > 640 {
		t.Fatalf("%d entries held, MaxKeys 640", n)
	}
}

func TestExpiredEntriesAreReclaimedBeforeLiveOnes(t *testing.T) {
	s, clock := newStore(t, memstore.WithMaxKeys(64*16)) // 16 per shard
	short := limittest.MustNew(s, limit.Policy{Name: "short", Limit: 5, Window: time.Second, Algorithm: limit.FixedWindow})
	long := limittest.MustNew(s, limit.Policy{Name: "long", Limit: 2, Window: time.Hour, Algorithm: limit.FixedWindow, AlignWindows: true})
	ctx := context.Background()
	// fill every shard with short-lived entries, then let them all expire
	for i := 0; i < 3000; i++ {
		short.Check(ctx, limit.Request{Peer: peer(i)}, limittest.NewWriter())
	}
	if n := s.Len(); n != 64*16 {
		t.Fatalf("%d entries after the fill, want the cap %d", n, 64*16)
	}
	clock.Advance(3 * time.Second)
	before := evictionsOf(s)
	// a long-lived identity uses its whole quota...
	for i := 0; i < 2; i++ {
		long.Check(ctx, limit.Request{Peer: "192.0.2.200:1"}, limittest.NewWriter())
	}
	// ...then new identities arrive in every (full) shard: the expired
	// entries make room, the live one stays and nothing live is evicted.
	for i := 3000; i < 3300; i++ {
		short.Check(ctx, limit.Request{Peer: peer(i)}, limittest.NewWriter())
	}
	if d := long.Check(ctx, limit.Request{Peer: "192.0.2.200:1"}, limittest.NewWriter()); d.Allowed {
		t.Fatal("a live, exhausted entry was evicted while expired entries could be reclaimed")
	}
	ev := evictionsOf(s)
	t.Logf("live evictions %d", ev.Live-before.Live)
	if ev.Live > before.Live+3 || ev.Expired < before.Expired+301 {
		t.Fatalf("Evictions %+v then %+v: want at most 3 live entries evicted (only when a new key's two buckets hold no expired entry), >= 301 expired ones reclaimed", before, ev)
	}
}

func TestConcurrentDecisionsAreExact(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			s, _ := newStore(t)
			p := limit.Policy{Algorithm: alg, Limit: 10, Window: 10 * time.Second}
			l := limittest.MustNew(s, p)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < 100; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if l.Check(context.Background(), limit.Request{Peer: "192.0.2.1:1"}, limittest.NewWriter()).Allowed {
						allowed.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if allowed.Load() != 10 {
				t.Fatalf("%d admitted, want exactly 10", allowed.Load())
			}
		})
	}
}

func TestExpiredStateStartsAfresh(t *testing.T) {
	s, clock := newStore(t)
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Second})
	ctx := context.Background()
	l.Check(ctx, limit.Request{Peer: "192.0.2.1:1"}, limittest.NewWriter())
	if l.Check(ctx, limit.Request{Peer: "192.0.2.1:1"}, limittest.NewWriter()).Allowed {
		t.Fatal("second request in the window admitted")
	}
	clock.Advance(2 * time.Second)
	if !l.Check(ctx, limit.Request{Peer: "192.0.2.1:1"}, limittest.NewWriter()).Allowed {
		t.Fatal("denied after the window and its TTL passed")
	}
}

func TestClockGoingBackwardsIsHandled(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			s, clock := newStore(t)
			l := limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: 2, Window: 10 * time.Second})
			ctx := context.Background()
			for i := 0; i < 2; i++ {
				l.Check(ctx, limit.Request{Peer: "192.0.2.1:1"}, limittest.NewWriter())
			}
			clock.Advance(-time.Hour)
			d := l.Check(ctx, limit.Request{Peer: "192.0.2.1:1"}, limittest.NewWriter())
			if d.Allowed {
				t.Fatal("a clock step backwards refilled the quota")
			}
			if d.RetryAfter <= 0 || d.ResetAfter < 0 || d.Remaining < 0 {
				t.Fatalf("negative or zero delays after a backwards clock: %+v", d)
			}
		})
	}
}

// The allowed path of engine + memory store allocates nothing: default
// disclosure, a socket-peer identity, a key already present.
func TestAllowedPathAllocatesNothing(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			s, _ := newStore(t)
			l := limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: 1_000_000, Window: 1000 * time.Second, Scope: limit.PerRoute})
			req := limit.Request{Route: "/v1/notes/{id}", Method: "GET", Path: "/v1/notes/1", Peer: "[2001:db8::7%eth0]:443"}
			ctx := context.Background()
			w := limittest.NewWriter()
			l.Check(ctx, req, w)
			allocs := testing.AllocsPerRun(1000, func() {
				if !l.Check(ctx, req, w).Allowed {
					t.Fatal("limited")
				}
			})
			if allocs != 0 {
				t.Fatalf("%.1f allocations per allowed decision, want 0", allocs)
			}
		})
	}
}

// fixedOp is a one-quota Op: FixedWindow 1 per minute on key.
func fixedOp(key string) limitstore.Op {
	return limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{
		{Key: []byte(key), Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 60_000}}}
}

// Keys sharing a shard (one hash tag) keep separate state.
func TestKeysOfOneShardKeepApart(t *testing.T) {
	s, _ := newStore(t)
	a, b := fixedOp("qg:{x}:b:f:r:a"), fixedOp("qg:{x}:b:f:r:b")
	ctx := context.Background()
	for _, op := range []*limitstore.Op{&a, &b} {
		if res, _ := limittest.Take(ctx, s, op); !res.Allowed {
			t.Fatalf("first call for %s denied: the other key's state leaked", op.Quotas[0].Key)
		}
	}
	for _, op := range []*limitstore.Op{&a, &b} {
		if res, _ := limittest.Take(ctx, s, op); res.Allowed {
			t.Fatalf("second call for %s admitted", op.Quotas[0].Key)
		}
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("Len %d, want 2", n)
	}
}

// MaxKeys is an exact bound, also when it is not a multiple of the shard
// count (found by trying to break the store: it used to round up per shard).
func TestMaxKeysIsExact(t *testing.T) {
	for _, max := range []int{384, 400, 1000} {
		s, _ := newStore(t, memstore.WithMaxKeys(max))
		l := limittest.MustNew(s, limit.Policy{Limit: 5, Window: time.Minute})
		for i := 0; i < 20_000; i++ {
			l.Check(context.Background(), limit.Request{Peer: peer(i)}, limittest.NewWriter())
		}
		if n := s.Len(); n > max {
			t.Errorf("WithMaxKeys(%d): %d entries held", max, n)
		}
	}
	if _, err := memstore.New(memstore.WithMaxKeys(383)); err == nil {
		t.Error("WithMaxKeys(383): want an error (fewer than 6 entries per shard)")
	}
}

// Keys that share one shard (one hash tag) still count against MaxKeys.
func TestKeysOfOneShardStayBounded(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(384)) // 6 per shard
	ctx := context.Background()
	for i := 0; i < 5000; i++ {
		op := fixedOp(fmt.Sprintf("qg:{x}:b:f:r:id%d", i))
		if res, _ := limittest.Take(ctx, s, &op); !res.Allowed {
			t.Fatalf("key %d: a fresh key was denied", i)
		}
	}
	if n := s.Len(); n != 6 {
		t.Errorf("WithMaxKeys(384): %d entries held after 5000 keys of one shard, want its share, 6", n)
	}
}

// op returns an Op of cost 1 over quotas, one per key.
func op(q limitstore.Quota, keys ...string) limitstore.Op {
	o := limitstore.Op{Cost: 1, N: len(keys)}
	for i, k := range keys {
		o.Quotas[i] = q
		o.Quotas[i].Key = []byte(k)
	}
	return o
}

func take(t *testing.T, s *memstore.Store, o limitstore.Op) limitstore.Result {
	t.Helper()
	res, err := limittest.Take(context.Background(), s, &o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The quotas of one Op are decided together, all or nothing, also under
// contention: with quotas of 10 and 5 on one identity, 100 concurrent
// requests admit exactly 5, and the 10-quota holds exactly those 5. Keys
// with different hash tags (which the engine never sends) lock both shards.
func TestQuotasOfOneOpAreAtomic(t *testing.T) {
	for name, keys := range map[string][2]string{
		"one-tag":  {"qg:{id}:a:f:r:x", "qg:{id}:b:f:r:x"},
		"two-tags": {"qg:{a}:a:f:r:x", "qg:{b}:b:f:r:x"},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			both := op(limitstore.Quota{Algorithm: limit.FixedWindow, WindowMS: 60_000}, keys[0], keys[1])
			both.Quotas[0].Limit, both.Quotas[1].Limit = 10, 5
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() {
					if take(t, s, both).Allowed {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if allowed.Load() != 5 {
				t.Fatalf("%d admitted, want 5", allowed.Load())
			}
			first := op(limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 60_000}, keys[0])
			if r := take(t, s, first); !r.Allowed || r.Quotas[0].Remaining != 4 {
				t.Fatalf("the 10-quota after 5 admissions: %+v, want allowed with 4 left", r.Quotas[0])
			}
		})
	}
}

// A refund never creates an entry and never extends one's expiry.
func TestRefundNeverCreatesOrExtends(t *testing.T) {
	s, clock := newStore(t)
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 2, WindowMS: 10_000}
	refund := op(q, "qg:{r}:b:f:r:x")
	refund.Refund = true
	take(t, s, refund)
	if n := s.Len(); n != 0 {
		t.Fatalf("a refund of a key never written created %d entries", n)
	}
	charge := op(q, "qg:{r}:b:f:r:x")
	res := take(t, s, charge)
	exp := res.NowMS + res.Quotas[0].TTLMS
	take(t, s, charge) // quota used up
	clock.Advance(5 * time.Second)
	refund.Quotas[0].Window = res.Quotas[0].Window
	if r := take(t, s, refund); r.Quotas[0].Remaining != 1 {
		t.Fatalf("after a refund of 1: %+v, want 1 left", r.Quotas[0])
	}
	if r := take(t, s, charge); !r.Allowed {
		t.Fatalf("the refunded unit was not given back: %+v", r)
	}
	// The entry dies when it was going to, refund or not: still held 1 ms
	// before its expiry, reclaimed at it by the next decision in its shard
	// (this refund, which creates nothing).
	clock.Advance(time.Duration(exp-1-clock.Now().UnixMilli()) * time.Millisecond)
	take(t, s, refund)
	before := evictionsOf(s)
	if n := s.Len(); n != 1 || before.Expired != 0 {
		t.Fatalf("1 ms before its expiry: Len %d, Evictions %+v; want the entry held", n, before)
	}
	clock.Advance(time.Millisecond)
	take(t, s, refund)
	if ev := evictionsOf(s); s.Len() != 0 || ev.Expired != 1 {
		t.Fatalf("at its expiry: Len %d, Evictions %+v; want it reclaimed, not extended by the refunds", s.Len(), ev)
	}
}

// At the cap, making room for a new quota never evicts another quota of the
// same Op: with 6 entries per shard (MaxKeys 384) and Ops of 4 quotas on one
// hash tag, each Op's 4 entries take the places of earlier Ops' entries,
// never of each other.
func TestEvictionSparesTheOpsOtherQuotas(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(384))
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 60_000}
	for i := range 50 {
		id := fmt.Sprint(i) // a fresh identity per Op
		four := op(q, "qg:{t}:1:"+id, "qg:{t}:2:"+id, "qg:{t}:3:"+id, "qg:{t}:4:"+id)
		four.Cost = 0 // keep every quota whole: nothing ranks the new ones worse
		if !take(t, s, four).Allowed {
			t.Fatalf("Op %d denied", i)
		}
		four.Cost = 1
		if r := take(t, s, four); !r.Allowed {
			t.Fatalf("Op %d: one of its quotas was evicted while it was written: %+v", i, r)
		}
		if r := take(t, s, four); r.Allowed {
			t.Fatalf("Op %d: a quota of 1 admitted twice: an entry of the Op was lost", i)
		}
	}
}

var algorithms = []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}

// decider decides one call of cost 1 for an identity.
type decider func(t *testing.T, id []byte) bool

// viaEngine decides through a Limiter (Consume).
func viaEngine(l *limit.Limiter) decider {
	return func(t *testing.T, id []byte) bool {
		d, err := l.Consume(context.Background(), string(id))
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
}

// viaStore decides with Take on s directly, for a 3-per-hour quota of alg,
// one key per identity (the identity is its hash tag, as the engine's keys
// have one per identity): the store's path is the engine's, at a fraction
// of the cost under -race.
func viaStore(s *memstore.Store, alg limit.Algorithm) decider {
	key := make([]byte, 0, 64)
	op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: alg, Limit: 3, Burst: 3, WindowMS: 3_600_000}}}
	return func(t *testing.T, id []byte) bool {
		key = append(append(append(key[:0], "qg:{"...), id...), "}:3p3600:r:k"...)
		op.Quotas[0].Key = key
		res, err := limittest.Take(context.Background(), s, &op)
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
}

// lockOut makes each of victims identities use up a 3-per-hour quota (the
// 4th call is denied) and fails the test if it is not.
func lockOut(t *testing.T, d decider, victims int) {
	t.Helper()
	for v := range victims {
		for i := range 4 {
			if got := d(t, victimID(v)); got != (i < 3) {
				t.Fatalf("victim %d, call %d: allowed %v", v, i+1, got)
			}
		}
	}
}

func victimID(v int) []byte { return strconv.AppendInt([]byte("victim-"), int64(v), 10) }

// stillDenied counts the victims denied on one more call.
func stillDenied(t *testing.T, d decider, victims int) int {
	t.Helper()
	n := 0
	for v := range victims {
		if !d(t, victimID(v)) {
			n++
		}
	}
	return n
}

// flood makes n identities never seen before call once each.
func flood(t *testing.T, d decider, n int) {
	t.Helper()
	id := make([]byte, 0, 32)
	for i := range n {
		id = strconv.AppendInt(append(id[:0], "flood-"...), int64(i), 10)
		if !d(t, id) {
			t.Fatalf("flood identity %d denied", i)
		}
	}
}

// 200 clients over their limit, then 10 x MaxKeys new identities
// (each making one call): at least 99% of the 200 are still denied, whatever
// the algorithm, with a small store and with the default one. The small
// store is driven through the engine; the default one (2.6 million
// decisions) through Take directly, which -race slows ten times less.
func TestFloodKeepsLimitedClientsLimited(t *testing.T) {
	const victims = 200
	for _, alg := range algorithms {
		for _, maxKeys := range []int{1024, memstore.DefaultMaxKeys} {
			t.Run(fmt.Sprintf("%v/MaxKeys=%d", alg, maxKeys), func(t *testing.T) {
				t.Parallel()
				// a clock that stands still (the flood takes no time) and
				// takes no lock, which -race makes costly
				s, err := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithClock(func() time.Time { return epoch }))
				if err != nil {
					t.Fatal(err)
				}
				d := viaStore(s, alg)
				if maxKeys == 1024 {
					d = viaEngine(limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: 3, Window: time.Hour}))
				}
				lockOut(t, d, victims)
				flood(t, d, 10*maxKeys)
				if n := s.Len(); n != maxKeys {
					t.Errorf("Len %d after the flood, want the cap %d", n, maxKeys)
				}
				ev := evictionsOf(s)
				if want := uint64(10*maxKeys + victims - maxKeys); ev.Live+ev.Expired != want {
					t.Errorf("Evictions %+v, want %d in all", ev, want)
				}
				denied := stillDenied(t, d, victims)
				if denied*100 < victims*99 {
					t.Fatalf("%d of %d locked-out clients still denied after the flood, want >= 99%%", denied, victims)
				}
				t.Logf("%d of %d still denied; evictions %+v", denied, victims, ev)
			})
		}
	}
}

// memstore WithMaxKeys(1024); FixedWindow 3 per hour; 200 identities
// consume 4 each (the 4th denied); then 3 000 other identities consume once:
// at least 99% of the 200 are still denied (most were re-admitted: eviction
// picked an arbitrary live entry).
func TestEvictionKeepsLimitedClientsLimited(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(1024))
	d := viaEngine(limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour}))
	lockOut(t, d, 200)
	flood(t, d, 3000)
	denied := stillDenied(t, d, 200)
	if denied < 198 {
		t.Fatalf("%d of 200 locked-out clients still denied, want >= 198", denied)
	}
	t.Logf("%d of 200 still denied", denied)
	if ev := evictionsOf(s); ev.Live == 0 {
		t.Fatalf("Evictions %+v: the flood into a full store evicted nothing live", ev)
	}
}

// Expired entries are reclaimed without waiting for the cap, and
// without a goroutine: after 100 000 one-off clients whose windows have all
// ended, Len() returns to (near) zero within a bounded number of further
// decisions, here all for one identity (the worst case: one shard's traffic
// must sweep all 64).
func TestSweepReclaimsExpiredEntries(t *testing.T) {
	const clients = 100_000
	s, clock := newStore(t, memstore.WithMaxKeys(1<<20))
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second})
	d := viaEngine(l)
	flood(t, d, clients)
	if n := s.Len(); n < clients*9/10 {
		t.Fatalf("Len %d right after %d clients: entries were dropped while live", n, clients)
	}
	clock.Advance(3 * time.Second) // every window and its 1 s grace are over
	// The documented bound: entries/2 + 4 096 decisions.
	const bound = clients/2 + 4096
	ops := 0
	for ; s.Len() > 1; ops++ {
		if ops == bound {
			t.Fatalf("Len %d after %d further decisions for one identity, want <= 1", s.Len(), ops)
		}
		clock.Advance(time.Millisecond)
		d(t, []byte("regular"))
	}
	t.Logf("%d expired entries reclaimed in %d decisions (bound %d)", clients, ops, bound)
	if ev := evictionsOf(s); ev.Expired < clients-1 || ev.Live != 0 {
		t.Fatalf("Evictions %+v, want %d expired, 0 live", ev, clients)
	}
}

// memoryChildEnv makes the test binary run TestMemoryPerKey's measurement
// itself, in a fresh process.
const memoryChildEnv = "MEMSTORE_MEMORY_CHILD"

// fill makes a store of MaxKeys maxKeys hold n keys (distinct identities of
// a sliding-window quota, each with one request) and returns it.
func fill(t testing.TB, maxKeys, n int) *memstore.Store {
	s, err := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithClock(func() time.Time { return epoch }))
	if err != nil {
		t.Fatal(err)
	}
	o := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: limit.SlidingWindow, Limit: 100, WindowMS: 60_000}}}
	key := make([]byte, 0, 64)
	for i := range n {
		key = strconv.AppendInt(append(key[:0], "qg:{"...), int64(i), 16)
		o.Quotas[0].Key = append(key, "}:100p60:s:r:k=client"...)
		if _, err := limittest.Take(context.Background(), s, &o); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// measure returns the live heap (runtime.MemStats.HeapAlloc after a GC)
// and the resident set size (VmRSS), in bytes.
func measure(t testing.TB) (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return ms.HeapAlloc, kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0, 0
}

// Memory per tracked key at 1 000 000 keys, at most 64 B, and
// the documented figures (package doc, DefaultMaxKeys): a full store's
// tables take at most 45 B per entry (DefaultMaxKeys: 11 MiB), and the RSS
// it adds to a process at most 80 B per entry (DefaultMaxKeys: 20 MiB;
// measured 52 to 67; not checked under -race, whose shadow memory counts in
// the RSS). Measured in a fresh
// process each (this test runs its own binary again): the live heap after a
// GC (runtime.ReadMemStats) and the resident set size (VmRSS), before and
// after filling a store, divided by the entries held. The RSS includes what
// the runtime still keeps of the smaller tables left behind while growing.
func TestMemoryPerKey(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SKIPPED: reads the RSS from /proc/self/status (Linux only)")
	}
	if maxKeys, err := strconv.Atoi(os.Getenv(memoryChildEnv)); err == nil {
		heap0, rss0 := measure(t)
		s := fill(t, maxKeys, max(maxKeys, 2*memstore.DefaultMaxKeys))
		heap1, rss1 := measure(t)
		fmt.Printf("MEMORY held=%d heap=%d rss=%d\n", s.Len(), heap1-heap0, rss1-rss0)
		runtime.KeepAlive(s)
		return
	}
	for _, maxKeys := range []int{1_000_000, memstore.DefaultMaxKeys} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryPerKey$", "-test.count=1")
		cmd.Env = append(os.Environ(), memoryChildEnv+"="+strconv.Itoa(maxKeys))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("measuring process: %v\n%s", err, out)
		}
		var held, heap, rss float64
		i := bytes.Index(out, []byte("MEMORY "))
		if i < 0 {
			t.Fatalf("no figures from the measuring process:\n%s", out)
		}
		if _, err := fmt.Sscanf(string(out[i:]), "MEMORY held=%g heap=%g rss=%g", &held, &heap, &rss); err != nil {
			t.Fatalf("%v in %q", err, out[i:])
		}
		t.Logf("MaxKeys %d, full: %.0f entries; heap %.1f B per entry (%.1f MiB), RSS %.1f B per entry (%.1f MiB)",
			maxKeys, held, heap/held, heap/(1<<20), rss/held, rss/(1<<20))
		if held < float64(maxKeys)*99/100 {
			t.Errorf("MaxKeys %d: only %.0f entries held", maxKeys, held)
		}
		if heap/held > 45 {
			t.Errorf("MaxKeys %d: heap %.1f B per entry, documented <= 45 B", maxKeys, heap/held)
		}
		switch {
		case raceEnabled:
			t.Logf("RSS not checked under -race: the race detector's shadow memory counts in it")
		case rss/held > 80:
			t.Errorf("MaxKeys %d: RSS %.1f B per entry, documented <= 80 B", maxKeys, rss/held)
		}
	}
}

// On the memory store: one Name, two policies
// (FixedWindow 5 per hour and 5 per second), alternating on one identity.
// They shared one record: the hour's limiter answered a Retry-After of
// ~242 years. Each policy now has its own record, so every delay stays
// within its own window.
func TestRegressionOneNameTwoPolicies(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := memstore.New(memstore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	hour := limittest.MustNew(s, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour})
	sec := limittest.MustNew(s, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second})
	ctx := context.Background()
	admitted := map[*limit.Limiter]int{}
	for i := 0; i < 10; i++ {
		for _, l := range []*limit.Limiter{hour, sec} {
			d, err := l.Consume(ctx, "id")
			if err != nil || d.RetryAfter > time.Hour || d.ResetAfter > time.Hour || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("call %d: %+v, %v: want every delay within the hour", i, d, err)
			}
			if d.Allowed {
				admitted[l]++
			}
		}
		clock.Advance(time.Second)
	}
	// The hour admits 5 of 10; the second admits all 10 (one call per
	// window of its own): neither counts the other's calls.
	if admitted[hour] != 5 || admitted[sec] != 10 {
		t.Fatalf("admitted %d (hour) and %d (second), want 5 and 10", admitted[hour], admitted[sec])
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("%d records, want one per policy", n)
	}
}

// On the memory store: two Limiters built separately from
// one policy with no Name shared one allowance without saying so. New now
// refuses the second while the first is alive on the store; one Name on
// both shares on purpose.
func TestRegressionIdenticalLimitersDoNotShareSilently(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	p := limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
	a := limittest.MustNew(s, p)
	if _, err := limit.New(s, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("second unnamed Limiter with the same numbers: %v, want ErrInvalidPolicy", err)
	}
	p.Name = "shared"
	b1, b2 := limittest.MustNew(s, p), limittest.MustNew(s, p)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		[]*limit.Limiter{b1, b2}[i%2].Consume(ctx, "u")
	}
	if d, _ := b2.Consume(ctx, "u"); d.Allowed {
		t.Fatal("one Name on both: the 6th call was admitted, want the one allowance of 5")
	}
	runtime.KeepAlive(a)
}

// Concurrent waiters on one key reserve no more than the token bucket's
// rate allows, however their goroutines interleave: a decision reads the
// clock under its key's lock, so that it never decides at an instant
// older than the decision before it. (Read before the lock, an older
// instant makes a TAT that runs MaxWait ahead look like a clock step back,
// and the clamp forgets reservations.)
func TestConcurrentWaitersNeverOverReserve(t *testing.T) {
	var ms atomic.Int64 // each reading of the clock is 1 ms after the one before
	s, err := memstore.New(memstore.WithClock(func() time.Time {
		now := epoch.Add(time.Duration(ms.Add(1)) * time.Millisecond)
		runtime.Gosched() // the reader may be descheduled right after a reading
		return now
	}))
	if err != nil {
		t.Fatal(err)
	}
	// One slot every 20 ms, reservations up to 100 ms ahead.
	q := limitstore.Quota{Key: []byte("{w}:tb:one"), Algorithm: limit.TokenBucket, Limit: 50, WindowMS: 1000, Burst: 1, MaxWaitMS: 100}
	const goroutines, takes = 8, 500
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			op := limitstore.Op{Cost: 1, N: 1, WaitMS: q.MaxWaitMS, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}
			for range takes {
				if res, _ := limittest.Take(context.Background(), s, &op); res.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// The TAT starts at the first reading (1 ms), moves 20 ms per admission
	// and ends at most a bucket (20 ms) and MaxWait past the last reading.
	last := ms.Load()
	bound := (last + 20 + q.MaxWaitMS - 1) / 20
	if n := admitted.Load(); n > bound {
		t.Fatalf("%d admitted over %d ms of 50 per second with 100 ms of reservations, want at most %d", n, last, bound)
	}
	t.Logf("%d admitted over %d ms (bound %d)", admitted.Load(), last, bound)
}

// A key that was Reset, expired and came back is a fresh State: epoch 0,
// on the Take that brings it back and on the next one, and a Refund of
// epoch 0 gives its charge back, whichever way the expired entry left the
// table (here the table's growth).
func TestAResetKeyBackAfterExpiryIsOfEpochZero(t *testing.T) {
	s, clock := newStore(t)
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 1000}
	long := q
	long.WindowMS = 3_600_000
	victim := op(q, "qg:{same}:b:f:r:victim")
	take(t, s, victim)
	if err := s.Reset(context.Background(), [][]byte{victim.Quotas[0].Key}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // keys of the same shard that outlive the victim: the table grows
		take(t, s, op(long, fmt.Sprintf("qg:{same}:b:f:r:other%d", i)))
		if i == 5 {
			clock.Advance(5 * time.Second) // the victim has expired
		}
	}
	first := take(t, s, victim)
	if q := first.Quotas[0]; !first.Allowed || q.Remaining != 4 || q.Epoch != 0 {
		t.Fatalf("the victim back: %+v, want a fresh quota of epoch 0", q)
	}
	if q := take(t, s, victim).Quotas[0]; q.Epoch != 0 {
		t.Fatalf("the next Take, no Reset since: epoch %d, want 0", q.Epoch)
	}
	refund := victim
	refund.Refund = true
	refund.Quotas[0].Window, refund.Quotas[0].Epoch = first.Quotas[0].Window, first.Quotas[0].Epoch
	if q := take(t, s, refund).Quotas[0]; q.Remaining != 4 {
		t.Errorf("a Refund of epoch 0: remaining %d, want 4 (one of the two charges given back)", q.Remaining)
	}
}

// An Op that names one key twice (two quotas of one key) keeps the last
// State written to it, whether the key is new or held already: what the
// reference store does, Take after Take.
func TestAKeyNamedTwiceInOneOpKeepsItsLastState(t *testing.T) {
	o := limitstore.Op{Cost: 1, N: 2}
	o.Quotas[0] = limitstore.Quota{Key: []byte("qg:{a}:k"), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 1_000}
	o.Quotas[1] = limitstore.Quota{Key: []byte("qg:{a}:k"), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 60_000}
	blocking := o
	blocking.Block = limitstore.Block{Key: []byte("qg:{a}:blk"), ForMS: 60_000}
	for name, o := range map[string]limitstore.Op{"plain": o, "block rule": blocking} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, clock := newStore(t)
			ref := limittest.NewStore(clock.Now)
			for i := range 4 {
				a, b := o, o
				got, err := limittest.Take(ctx, s, &a)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := limittest.Take(ctx, ref, &b)
				if got != want {
					t.Fatalf("Take %d:\n got  %+v\n want %+v", i, got, want)
				}
				clock.Advance(300 * time.Millisecond)
			}
		})
	}
}

// MaxKeys bounds a store of Ops with a block rule too, whose every key
// (four quotas, the block record and the unsettled charges) sits in one
// shard: at the smallest cap, each shard holds exactly one such Op's keys,
// and every Op of a fresh identity is admitted.
func TestMaxKeysHoldsForOpsWithABlockRule(t *testing.T) {
	ctx := context.Background()
	const maxKeys = 384
	s, _ := newStore(t, memstore.WithMaxKeys(maxKeys))
	for id := range 2000 {
		o := limitstore.Op{Cost: 1, N: 4}
		for i := range 4 {
			o.Quotas[i] = limitstore.Quota{Key: []byte(fmt.Sprintf("qg:{id%d}:b:q%d", id, i)), Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}
		}
		o.Block = limitstore.Block{Key: []byte(fmt.Sprintf("qg:{id%d}:blk", id)), ForMS: 60_000, LeaseMS: 60_000, PendingKey: []byte(fmt.Sprintf("qg:{id%d}:pend", id))}
		if res, err := limittest.Take(ctx, s, &o); err != nil || !res.Allowed {
			t.Fatalf("identity %d: %+v %v", id, res, err)
		}
		if n := s.Len(); n > maxKeys {
			t.Fatalf("after identity %d: %d entries held, WithMaxKeys(%d)", id, n, maxKeys)
		}
	}
}
