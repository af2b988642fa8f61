package limittest

import (
	"context"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// PendingPolicy is the policy CheckUnsettledCharges drives: the examples'
// POST /v1/otp (3 failures per 5 s, fixed window, epoch-aligned; blocks
// of 8 s doubling up to 16 s), counting only failed responses, with a
// Lease of 2 s.
func PendingPolicy() limit.Policy {
	return limit.Policy{Name: "otp", Algorithm: limit.FixedWindow, Limit: 3, Window: 5 * time.Second, AlignWindows: true,
		CountStatus: func(status int) bool { return status >= 400 },
		BlockFor:    8 * time.Second, BlockMax: 16 * time.Second, Lease: 2 * time.Second}
}

// CheckUnsettledCharges checks on s that, under a policy that counts only
// failures and blocks (PendingPolicy), a block follows the counted
// requests only: successes in flight (charged, not finished) that fill
// the quota make a denial that begins no block, and once finished they are
// given back; failures that spend the quota make the next request begin
// the block; a charge whose Finish never comes holds off a block until
// its lease ends (Lease to twice that), then counts; and successes
// concurrent with each other and with denials, from many goroutines, never
// block. run.Set sets the clock (it is called with readings that only move
// forward, the first run.Start rounded down to a window start), and
// run.Options are passed to limit.New; s must answer from its own state
// (no deny cache). Rounds, Steps, Seed and Scale are unused.
func CheckUnsettledCharges(t *testing.T, s limitstore.Store, run BlockRun) {
	t.Helper()
	ctx := context.Background()
	l, err := limit.New(s, PendingPolicy(), run.Options...)
	if err != nil {
		t.Fatal(err)
	}
	now := run.Set(run.Start - run.Start%5000)
	advance := func(ms int64) { now = run.Set(now + ms) }
	consume := func(id string) limit.Decision {
		t.Helper()
		d, err := l.Consume(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// A window begins at now (a multiple of 5 s); every check below is at
	// an exact instant of it.
	var inFlight []limit.Decision
	for i := range 3 {
		d := consume("a")
		if !d.Allowed || d.Blocked {
			t.Fatalf("success %d, admitted and in flight: %+v", i+1, d)
		}
		inFlight = append(inFlight, d)
	}
	if d := consume("a"); d.Allowed || d.Blocked || d.RetryAfter != 5*time.Second {
		t.Fatalf("a request denied while 3 successes are in flight: %+v, want limited by the quota for 5 s and no block", d)
	}
	if d, err := l.Peek(ctx, "a"); err != nil || d.Allowed || d.Blocked {
		t.Fatalf("Peek while 3 successes are in flight: %+v, %v: want limited and no block a request would begin", d, err)
	}
	for i := range inFlight {
		l.Finish(ctx, &inFlight[i], 204)
	}
	if d, err := l.Peek(ctx, "a"); err != nil || !d.Allowed || d.Blocked || d.Remaining != 2 {
		t.Fatalf("Peek once the successes are finished: %+v, %v: want the whole quota back (Remaining 2 after the request it looks at)", d, err)
	}
	for i := range 3 {
		d := consume("a")
		if !d.Allowed {
			t.Fatalf("failure %d: %+v", i+1, d)
		}
		l.Finish(ctx, &d, 401)
	}
	if d := consume("a"); d.Allowed || !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("the request after 3 failures: %+v, want it to begin a block of 8 s", d)
	}

	// A charge whose Finish never comes (a crashed process) holds off a
	// block for its lease, then counts.
	lost := consume("b")
	_ = lost // never finished
	for i := range 2 {
		d := consume("b")
		if !d.Allowed {
			t.Fatalf("failure %d of b: %+v", i+1, d)
		}
		l.Finish(ctx, &d, 401)
	}
	if d := consume("b"); d.Allowed || d.Blocked {
		t.Fatalf("a denial while a charge is unsettled: %+v, want no block", d)
	}
	advance(1999) // the charge's lease period and the next: 2 s to 4 s
	if d := consume("b"); d.Allowed || d.Blocked {
		t.Fatalf("a denial 1999 ms after the lost charge: %+v, want no block (its lease holds for at least 2 s)", d)
	}
	advance(2001) // 4 s: the period after the charge's has ended
	if d := consume("b"); d.Allowed || !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("a denial 4 s after the lost charge: %+v, want a block of 8 s (the charge counts)", d)
	}

	// Successes from many goroutines, concurrent with each other and with
	// the denials they cause, never block; all given back, the quota is
	// whole, and failures then block.
	advance(1000) // a new window
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted, denied int
	// Three successes in flight first: every goroutine's first request is
	// denied while they are, and they are finished once all 8 have asked.
	inFlight = inFlight[:0]
	for range 3 {
		inFlight = append(inFlight, consume("c"))
	}
	firsts := make(chan struct{}, 8)
	wg.Go(func() {
		for range 8 {
			<-firsts
		}
		for i := range inFlight {
			l.Finish(ctx, &inFlight[i], 204)
		}
	})
	for range 8 {
		wg.Go(func() {
			// Each goroutine holds its admitted success while it asks
			// again, so that successes stay in flight across the others'
			// requests and many are denied meanwhile.
			var held *limit.Decision
			firsts := firsts
			for range 25 {
				d, err := l.Consume(ctx, "c")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if d.Blocked {
					t.Errorf("a success (or a denial among successes) was blocked: %+v", d)
				}
				if d.Allowed {
					admitted++
				} else {
					denied++
				}
				mu.Unlock()
				if firsts != nil {
					firsts <- struct{}{}
					firsts = nil
				}
				if held != nil {
					l.Finish(ctx, held, 204)
				}
				held = nil
				if d.Allowed {
					held = &d
				}
			}
			if held != nil {
				l.Finish(ctx, held, 204)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("concurrent successes: %d admitted, %d denied, none blocked", admitted, denied)
	if denied < 8 {
		t.Fatalf("%d denials among the concurrent successes, want at least the 8 made while 3 were in flight", denied)
	}
	if d, err := l.Peek(ctx, "c"); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Peek after the concurrent successes: %+v, %v: want the whole quota (Remaining 2 after the request it looks at)", d, err)
	}
	for range 3 {
		wg.Go(func() {
			d, err := l.Consume(ctx, "c")
			if err != nil || !d.Allowed {
				t.Errorf("a concurrent failure: %+v, %v", d, err)
			}
			l.Finish(ctx, &d, 401)
		})
	}
	wg.Wait()
	if d := consume("c"); d.Allowed || !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("the request after 3 concurrent failures: %+v, want a block of 8 s", d)
	}
}
