package memstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

func leaseOp(key string, tok byte, limit int64) limitstore.LeaseOp {
	op := limitstore.LeaseOp{Key: []byte(key), Cost: 1, Limit: limit, LeaseMS: 1000}
	op.Token[0] = tok
	return op
}

// Acquire and Release as the Leaser contract says: the limit, renewal of a
// held token, expiry at the deadline, and releases that free only the
// holder's own slot.
func TestLeaseContract(t *testing.T) {
	s, clock := newStore(t)
	ctx := context.Background()
	a, b, c := leaseOp("q:{x}:c", 1, 2), leaseOp("q:{x}:c", 2, 2), leaseOp("q:{x}:c", 3, 2)
	for i, op := range []*limitstore.LeaseOp{&a, &b} {
		if res, _ := s.Acquire(ctx, op); !res.Allowed || res.Held != int64(i+1) {
			t.Fatalf("acquire %d: %+v", i, res)
		}
	}
	if res, _ := s.Acquire(ctx, &c); res.Allowed || res.Held != 2 {
		t.Fatalf("third holder: %+v, want denied with 2 held", res)
	}
	clock.Advance(600 * time.Millisecond)
	if res, _ := s.Acquire(ctx, &a); !res.Allowed || res.Held != 2 { // a renews
		t.Fatalf("renewal: %+v", res)
	}
	clock.Advance(400 * time.Millisecond) // b's deadline: free; a's moved on
	if res, _ := s.Acquire(ctx, &c); !res.Allowed {
		t.Fatalf("b's lease expired, c should fit: %+v", res)
	}
	// b releases after its expiry (its slot is c's now): frees nothing.
	if freed, _ := s.Release(ctx, &b); freed {
		t.Fatal("a release after expiry reported a freed slot")
	}
	d := leaseOp("q:{x}:c", 4, 2)
	if res, _ := s.Acquire(ctx, &d); res.Allowed {
		t.Fatal("b's late release freed another holder's slot")
	}
	// A foreign token and a double release free nothing.
	if freed, _ := s.Release(ctx, &d); freed {
		t.Fatal("a token that holds nothing freed a slot")
	}
	if freed, _ := s.Release(ctx, &a); !freed {
		t.Fatal("a's own release")
	}
	if freed, _ := s.Release(ctx, &a); freed {
		t.Fatal("double release")
	}
	if res, _ := s.Acquire(ctx, &d); !res.Allowed || res.Held != 2 {
		t.Fatalf("one slot free after a's release: %+v", res)
	}
	if res, _ := s.Acquire(ctx, &b); res.Allowed {
		t.Fatal("full again")
	}
	// Everything expires: the sets are dropped, a quiet shard's within
	// 16 x 64 Acquires in another.
	clock.Advance(2 * time.Second)
	e := leaseOp("q:{y}:c", 5, 1)
	for range 16*64 + 16 {
		s.Acquire(ctx, &e)
		s.Release(ctx, &e)
	}
	if slots, sets := s.Leases(); slots != 0 || sets != 0 {
		t.Fatalf("after expiry: %d slots in %d sets kept", slots, sets)
	}
}

// The memory store is exact: 1 000 goroutines on one identity with Limit
// 10 never have more than 10 handlers running at once (counted by the
// handlers), and every slot is back when the load stops.
func TestConcurrencyExactWith1000Goroutines(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.Concurrency, Limit: 10})
	var in, peak, served atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range 1000 {
		wg.Go(func() {
			for range 20 {
				d, _ := l.Consume(ctx, "one")
				if !d.Allowed {
					continue
				}
				n := in.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				served.Add(1)
				time.Sleep(50 * time.Microsecond)
				in.Add(-1)
				l.Finish(ctx, &d, 0)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 10 || p < 1 {
		t.Fatalf("peak %d handlers at once, want 1..10", p)
	}
	if slots, _ := s.Leases(); slots != 0 {
		t.Fatalf("%d slots held after the load", slots)
	}
	for range 10 { // all 10 slots are free
		if d, _ := l.Consume(ctx, "one"); !d.Allowed {
			t.Fatal("a slot was not given back")
		}
	}
	t.Logf("peak %d, served %d of 20000", peak.Load(), served.Load())
}

// The allowed path of a Concurrency policy on the memory store, a request
// through Check and its Finish, allocates nothing.
func TestConcurrencyAllowedPathAllocatesNothing(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	s, _ := newStore(t)
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.Concurrency, Limit: 4})
	req := limit.Request{Route: "/v1/slow", Method: "GET", Path: "/v1/slow", Peer: "[2001:db8::7]:443"}
	ctx := context.Background()
	w := limittest.NewWriter()
	f := func() {
		d := l.Check(ctx, req, w)
		if !d.Allowed {
			t.Fatal("limited")
		}
		l.Finish(ctx, &d, 200)
	}
	f()
	if allocs := testing.AllocsPerRun(1000, f); allocs != 0 {
		t.Fatalf("%.1f allocations per allowed request, want 0", allocs)
	}
}

// A handler that runs 3x its Lease keeps its slot (the holder renews the
// lease): no other request takes it meanwhile, and it is free once the
// handler returns.
func TestConcurrencyLeaseRenewalKeepsTheSlot(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	const lease = 600 * time.Millisecond
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.Concurrency, Limit: 1, Lease: lease})
	entered, release := make(chan struct{}), make(chan struct{})
	h := l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
	}), nil, nil)
	serve := func(path string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.9:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	done := make(chan int)
	go func() { done <- serve("/slow") }()
	<-entered
	start := time.Now()
	tries := 0
	for time.Since(start) < 3*lease {
		if code := serve("/other"); code != http.StatusTooManyRequests {
			t.Fatalf("after %v (lease %v): another request got %d while the slot's holder still runs", time.Since(start), lease, code)
		}
		tries++
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the long request: %d", code)
	}
	if code := serve("/other"); code != 200 {
		t.Fatalf("after the holder returned: %d, want 200", code)
	}
	t.Logf("%d requests refused over %v", tries, 3*lease)
}
