package limit

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchStore is an in-process Store for benchmarks: a map of pointers under
// one mutex, so that deciding for a key already present allocates nothing
// (mapStore re-inserts entries and logs keys, which allocates).
type benchStore struct {
	mu  sync.Mutex
	m   stateMap
	now int64
}

func (s *benchStore) Take(_ context.Context, op *Op) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.take(op, s.now), nil
}

func (s *benchStore) InProcess() {}

// benchLimiter returns a limiter over a benchStore whose quota is far above
// any b.N unless p sets a Limit.
func benchLimiter(tb testing.TB, p Policy) (*Limiter, *benchStore) {
	store := &benchStore{m: map[string]*State{}, now: epochMS}
	if p.Limit == 0 {
		p.Limit = 1 << 28
		p.Window = time.Hour
	}
	return mustNew(tb, store, p), store
}

func BenchmarkCheck(b *testing.B) {
	cases := []struct {
		name string
		p    Policy
		deny bool
	}{
		{"allowed/default-disclosure", Policy{}, false},
		{"allowed/always-ietf", Policy{Disclosure: DiscloseAlways}, false},
		{"allowed/always-all-styles", Policy{Disclosure: DiscloseAlways, HeaderStyle: HeadersIETF | HeadersTriplet | HeadersLegacy}, false},
		{"allowed/skip-path-miss", Policy{SkipPaths: []string{"/health", "/metrics"}}, false},
		{"skipped/skip-path-hit", Policy{SkipPaths: []string{"/v1/notes/1"}}, false},
		{"denied/default-disclosure", Policy{Limit: 1}, true},
		{"denied/on-limit-all-styles", Policy{Limit: 1, Disclosure: DiscloseOnLimit, HeaderStyle: HeadersIETF | HeadersTriplet | HeadersLegacy}, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			l, _ := benchLimiter(b, tc.p)
			r := req("192.0.2.1:4711", "/v1/notes/1")
			ctx := context.Background()
			l.Check(ctx, r) // create the key (and exhaust a quota of 1)
			b.ReportAllocs()
			for b.Loop() {
				resp := l.Check(ctx, r)
				if resp.Denied() != tc.deny {
					b.Fatalf("Denied() = %v", resp.Denied())
				}
			}
		})
	}
	b.Run("allowed/default-disclosure/parallel-1024-peers", func(b *testing.B) {
		l, _ := benchLimiter(b, Policy{})
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1)
			ctx := context.Background()
			for pb.Next() {
				i++
				peer := peers[i&1023]
				resp := l.Check(ctx, Request{Method: "GET", Path: "/v1/notes/1", Peer: peer})
				if resp.Denied() {
					b.Fatal("denied")
				}
			}
		})
	})
}

var peers = func() []string {
	p := make([]string, 1024)
	for i := range p {
		p[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":5000"
	}
	return p
}()

// The allowed path at the default disclosure allocates nothing once the
// key exists. Not parallel: allocation counts are process-wide.
func TestCheckAllowedDefaultDisclosureDoesNotAllocate(t *testing.T) {
	l, _ := benchLimiter(t, Policy{})
	// Count the refills of the scratch pool: sync.Pool drops a quarter of
	// its Puts at random under the race detector, and any GC may empty it;
	// each refill allocates exactly 3 objects (scratch, key and id buffers).
	var refills atomic.Int64
	orig := l.scratch.New
	l.scratch.New = func() any { refills.Add(1); return orig() }
	r := req("192.0.2.1:4711", "/v1/notes/1")
	ctx := context.Background()
	check := func() {
		if resp := l.Check(ctx, r); resp.Denied() || len(resp.Fields()) != 0 {
			t.Fatal("denied, or fields at the default disclosure")
		}
	}
	check()
	if avg := testing.AllocsPerRun(1000, check); avg != 0 {
		t.Fatalf("Check allocates %.2f objects per allowed request at the default disclosure, want 0", avg)
	}
	// A finer count than AllocsPerRun's truncated average: allocations
	// beyond the pool refills, which must stay far below one per request
	// (the process allocates a little in the background: timers, the
	// testing framework; a per-request allocation would count 2000 here).
	const runs = 2000
	var before, after runtime.MemStats
	refills.Store(0)
	runtime.ReadMemStats(&before)
	for range runs {
		check()
	}
	runtime.ReadMemStats(&after)
	if extra := int64(after.Mallocs-before.Mallocs) - 3*refills.Load(); extra*100 >= runs {
		t.Fatalf("%d allocations in %d allowed Checks beyond %d pool refills: Check allocates", extra, runs, refills.Load())
	}
}
