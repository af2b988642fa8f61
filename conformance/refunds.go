package conformance

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// refundDecisions drives random sequences of stacked requests through two
// Limiters on the store under test and, in lockstep, on the reference store
// (limittest.Store), at one fake clock: an outer mount counting every
// request, an inner one counting only failures (CountStatus), random
// statuses, and settlements (Limiter.Finish) that come late, some after the
// window has rolled. Every decision must be bit-identical on both stores
// (allowed, remaining, reset, retry-after): the refunds of stacked mounts
// and of counting by status are exact on the store.
func refundDecisions(t *testing.T, alg limit.Algorithm, newStore NewStoreFunc) {
	clock := newStepClock()
	stores := [2]limitstore.Store{newStore(t, clock.Now), limittest.NewStore(clock.Now)}
	type pair struct{ outer, inner *limit.Limiter }
	var ls [2]pair
	// A store call that times out on a loaded machine would be decided by
	// the FailureMode, not the store: the comparison is of store decisions,
	// so the timeout is generous and a failed call fails the test loudly,
	// a refund's too (Finish reports it to the Observer and the log only).
	// The "conformance" prefix: the keys the stores' tests delete.
	rec := &limittest.Recorder{}
	var logged bytes.Buffer
	opts := []limit.Option{limit.WithKeyPrefix("conformance"),
		limit.WithObserver(rec), limit.WithLogger(slog.New(slog.NewTextHandler(&logged, nil)))}
	for i, s := range stores {
		var err error
		if ls[i].outer, err = limit.New(s, limit.Policy{Name: "refund-outer-" + alg.String(), Algorithm: alg, Limit: 6, Window: 2 * time.Second}, opts...); err != nil {
			t.Fatal(err)
		}
		if ls[i].inner, err = limit.New(s, limit.Policy{Name: "refund-inner-" + alg.String(), Algorithm: alg, Limit: 3, Window: time.Second,
			CountStatus: func(s int) bool { return s >= 400 }}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	type pending struct {
		d      [2][2]limit.Decision // [store][outer, inner]
		status int
	}
	var waiting []pending
	rng := rand.New(rand.NewPCG(uint64(alg), 15))
	ctx := context.Background()
	sink := limittest.NewSink()
	settle := func(p *pending) {
		for i := range ls {
			ls[i].inner.Finish(ctx, &p.d[i][1], p.status)
			ls[i].outer.Finish(ctx, &p.d[i][0], p.status)
		}
	}
	storeErrors := func() string { // a refund's, which no decision shows
		return fmt.Sprintf("%d failed store calls; log: %q", rec.StoreErrors(), logged.String())
	}
	summary := func(d limit.Decision) string {
		return fmt.Sprintf("%v r=%d reset=%v retry=%v", d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter)
	}
	for step := range 1500 {
		clock.Advance(time.Duration(rng.Int64N(250)) * time.Millisecond)
		client := fmt.Sprintf("192.0.2.%d:1000", 1+rng.IntN(3))
		var p pending
		p.status = []int{200, 204, 401, 500}[rng.IntN(4)]
		for i := range ls {
			r := httptest.NewRequest(http.MethodPost, "/login", nil)
			r.RemoteAddr = client
			p.d[i][0] = ls[i].outer.CheckHTTP(sink, r, limit.Request{Route: "/login"})
			if p.d[i][0].Allowed {
				p.d[i][1] = ls[i].inner.CheckHTTP(sink, r, limit.Request{Route: "/login"})
			}
		}
		for j := range 2 {
			if p.d[0][j].StoreFailed {
				t.Fatalf("step %d, mount %d: the store call failed (the FailureMode decided)", step, j)
			}
			if a, b := summary(p.d[0][j]), summary(p.d[1][j]); a != b {
				t.Fatalf("step %d, mount %d: store %s, reference %s (%s)", step, j, a, b, storeErrors())
			}
		}
		waiting = append(waiting, p)
		for len(waiting) > 0 && rng.IntN(3) > 0 {
			k := rng.IntN(len(waiting))
			settle(&waiting[k])
			waiting = append(waiting[:k], waiting[k+1:]...)
		}
	}
	for k := range waiting {
		settle(&waiting[k])
	}
	if rec.StoreErrors() > 0 {
		t.Fatal(storeErrors())
	}
}

// countByStatusExact runs requests of one client from many goroutines
// through a Limiter counting only failures, each settled after a random
// "handler" outcome: refunds racing admissions. At no point may more
// failures have been admitted than the quota, and once all are settled the
// store holds exactly the admitted failures.
func countByStatusExact(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	s := newStore(t, clock.Now)
	l, err := limit.New(s, limit.Policy{Name: "count-by-status-exact", Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour,
		CountStatus: func(s int) bool { return s >= 400 }, FailureMode: limit.FailClosed},
		limit.WithKeyPrefix("conformance")) // the keys the stores' tests delete
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var mu sync.Mutex
	failures := 0
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 25 {
				d, _ := l.Consume(ctx, "client")
				if !d.Allowed {
					continue
				}
				status := 200
				if rng.IntN(3) == 0 {
					status = 401
					mu.Lock()
					failures++
					mu.Unlock()
				}
				l.Finish(ctx, &d, status)
			}
		})
	}
	wg.Wait()
	if failures > 10 {
		t.Fatalf("%d failures admitted, quota 10", failures)
	}
	left := int64(10 - failures)
	d, _ := l.Consume(ctx, "client")
	if d.Allowed != (left > 0) || (d.Allowed && d.Remaining != left-1) {
		t.Fatalf("after %d admitted failures: %+v; want %d left", failures, d, left)
	}
}
