package memstore_test

import (
	"context"
	"fmt"
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
		if res, _ := s.Take(ctx, op); !res.Allowed {
			t.Fatalf("first call for %s denied: the other key's state leaked", op.Quotas[0].Key)
		}
	}
	for _, op := range []*limitstore.Op{&a, &b} {
		if res, _ := s.Take(ctx, op); res.Allowed {
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
	for _, max := range []int{256, 300, 1000} {
		s, _ := newStore(t, memstore.WithMaxKeys(max))
		l := limittest.MustNew(s, limit.Policy{Limit: 5, Window: time.Minute})
		for i := 0; i < 20_000; i++ {
			l.Check(context.Background(), limit.Request{Peer: peer(i)}, limittest.NewWriter())
		}
		if n := s.Len(); n > max {
			t.Errorf("WithMaxKeys(%d): %d entries held", max, n)
		}
	}
	if _, err := memstore.New(memstore.WithMaxKeys(255)); err == nil {
		t.Error("WithMaxKeys(255): want an error (fewer than 4 entries per shard)")
	}
}

// Keys that share one shard (one hash tag) still count against MaxKeys.
func TestKeysOfOneShardStayBounded(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(256)) // 4 per shard
	ctx := context.Background()
	for i := 0; i < 5000; i++ {
		op := fixedOp(fmt.Sprintf("qg:{x}:b:f:r:id%d", i))
		if res, _ := s.Take(ctx, &op); !res.Allowed {
			t.Fatalf("key %d: a fresh key was denied", i)
		}
	}
	if n := s.Len(); n != 4 {
		t.Errorf("WithMaxKeys(256): %d entries held after 5000 keys of one shard, want its share, 4", n)
	}
}
