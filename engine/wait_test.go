package limit_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// feedPolicy is a token bucket of 5 per second, burst 1, whose requests
// wait up to 2 s for a slot: one every 200 ms.
func feedPolicy() limit.Policy {
	return limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second}
}

func TestMaxWaitRejected(t *testing.T) {
	store := limittest.NewStore(time.Now)
	for _, tc := range []struct {
		name string
		p    limit.Policy
		want []string
	}{
		{"sliding window", limit.Policy{MaxWait: time.Second}, []string{"MaxWait", "TokenBucket"}},
		{"fixed window", limit.Policy{Algorithm: limit.FixedWindow, MaxWait: time.Second}, []string{"MaxWait", "use TokenBucket"}},
		{"negative", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: -time.Second}, []string{"MaxWait", "negative"}},
		{"not whole ms", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: time.Second + time.Microsecond}, []string{"MaxWait", "milliseconds"}},
		{"over an hour", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: 61 * time.Minute}, []string{"MaxWait", "maximum"}},
		{"shadow", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: time.Second, Shadow: true}, []string{"MaxWait", "Shadow"}},
		{"MaxWaiting negative", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: time.Second, MaxWaiting: -1}, []string{"MaxWaiting", "negative"}},
		{"MaxWaiting alone", limit.Policy{Algorithm: limit.TokenBucket, MaxWaiting: 5}, []string{"MaxWaiting", "MaxWait is 0"}},
		{"inexact", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1 << 40, Window: time.Hour, Burst: 1, MaxWait: time.Hour}, []string{"MaxWait", "2^50"}},
	} {
		_, err := limit.New(store, tc.p)
		if !errors.Is(err, limit.ErrInvalidPolicy) {
			t.Errorf("%s: New: %v, want ErrInvalidPolicy", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// Requests sent at once are served one emission interval apart, in the
// order of their reservations, each after its wait; the first past
// MaxWait is limited at once, reserving nothing.
func TestMaxWaitServesInSlotOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &limittest.Recorder{}
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy(), limit.WithObserver(rec))
		ctx := context.Background()
		var waited []time.Duration
		var mu sync.Mutex
		var wg sync.WaitGroup
		// One at a time into the store (each reserves the slot after the
		// one before), then all waiting together.
		for range 11 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Consume(ctx, "client")
				if err != nil || !d.Allowed {
					t.Errorf("within MaxWait: %+v, %v", d, err)
				}
				mu.Lock()
				waited = append(waited, d.Waited)
				mu.Unlock()
			}()
			synctest.Wait()
		}
		d, _ := l.Consume(ctx, "client")
		if d.Allowed || d.Waited != 0 || d.RetryAfter != 2200*time.Millisecond {
			t.Fatalf("the 12th request (slot 2.2 s away, MaxWait 2 s): %+v; want limited at once, RetryAfter 2.2s", d)
		}
		wg.Wait()
		slices.Sort(waited)
		for i, w := range waited {
			if want := time.Duration(i) * 200 * time.Millisecond; w != want {
				t.Fatalf("request %d waited %v, want %v (waits %v)", i, w, want, waited)
			}
		}
		if n, longest := rec.Waits("feed", true); n != 10 || longest != 2*time.Second {
			t.Fatalf("Observer: %d waits served, longest %v; want 10, 2s", n, longest)
		}
		// Nothing was reserved by the limited one: the next slot is
		// right after the last waiter's.
		if d, _ := l.Consume(ctx, "client"); !d.Allowed || d.Waited != 200*time.Millisecond {
			t.Fatalf("after the waiters: %+v; want a wait of one interval", d)
		}
	})
}

// A waiter whose context ends gives its reservation back, exactly: the
// next request reserves the very slot it freed.
func TestMaxWaitCancelGivesTheSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &limittest.Recorder{}
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy(), limit.WithObserver(rec))
		if d, _ := l.Consume(context.Background(), "c"); !d.Allowed || d.Waited != 0 {
			t.Fatalf("first: %+v", d)
		}
		go l.Consume(context.Background(), "c") // slot at 200 ms
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan limit.Decision)
		go func() { d, _ := l.Consume(ctx, "c"); done <- d }() // slot at 400 ms
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		cancel()
		d := <-done
		if d.Allowed || d.Outcome != limit.OutcomeLimited || d.Waited != 100*time.Millisecond || d.RetryAfter != 300*time.Millisecond {
			t.Fatalf("cancelled waiter: %+v; want limited after 100ms, its slot 300ms away", d)
		}
		if n, _ := rec.Waits("c", false); n != 0 {
			t.Fatal("wrong bucket label")
		}
		if n, longest := rec.Waits("feed", false); n != 1 || longest != 100*time.Millisecond {
			t.Fatalf("Observer: %d given back, %v; want 1, 100ms", n, longest)
		}
		// Its slot (400 ms) is the next one: 300 ms from now.
		if d, _ := l.Consume(context.Background(), "c"); !d.Allowed || d.Waited != 300*time.Millisecond {
			t.Fatalf("after the cancellation: %+v; want the freed slot, 300ms away", d)
		}
	})
}

// gatedStore holds its next Takes, one hold each in order: before the
// store (a request that arrived first reaches it last) or after it (a
// request's answer comes back late).
type gatedStore struct {
	limitstore.Store
	mu    sync.Mutex
	holds []hold
}

// hold is what one Take waits for: before closes, then after closes.
type hold struct{ before, after chan struct{} }

func (s *gatedStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *gatedStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.mu.Lock()
	var h hold
	if len(s.holds) > 0 {
		h, s.holds = s.holds[0], s.holds[1:]
	}
	s.mu.Unlock()
	if h.before != nil {
		<-h.before
	}
	res, err := limittest.Take(ctx, s.Store, op)
	if h.after != nil {
		<-h.after
	}
	return res, err
}

// waitFor runs Consume(ctx, "c") on its own goroutine and returns where its
// Decision and the instant it returned go.
func waitFor(ctx context.Context, l *limit.Limiter) chan limit.Decision {
	done := make(chan limit.Decision, 1)
	go func() { d, _ := l.Consume(ctx, "c"); done <- d }()
	return done
}

// Waiters are served in the order they arrived, not in the order their
// reservations reached the store: a request held on its way to the store
// while a later one reserved the earlier slot is served first, at that
// slot, and the later one at the slot reserved for the first.
func TestMaxWaitServesInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{Store: limittest.NewStore(time.Now)}
		l := mustNew(t, store, feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c") // the burst: the next slot at 200 ms
		gate := make(chan struct{})
		store.holds = []hold{{before: gate}}
		first := waitFor(context.Background(), l) // held before the store
		synctest.Wait()
		second := waitFor(context.Background(), l) // reserves 200 ms
		synctest.Wait()
		close(gate) // the first reserves 400 ms
		d1 := <-first
		at1 := time.Since(start)
		d2 := <-second
		at2 := time.Since(start)
		if !d1.Allowed || !d2.Allowed || at1 != 200*time.Millisecond || at2 != 400*time.Millisecond {
			t.Fatalf("first to arrive served at %v (%+v), second at %v (%+v); want 200ms, 400ms", at1, d1, at2, d2)
		}
		if d1.ResetAt.Before(start.Add(400*time.Millisecond)) || !d1.ResetAt.Before(d2.ResetAt) {
			t.Fatalf("the slots' numbers did not follow the slots: ResetAt %v, %v", d1.ResetAt.Sub(start), d2.ResetAt.Sub(start))
		}
	})
}

// The same when the later arrival's earlier slot comes back from the store
// after the first one's: the first is served at it.
func TestMaxWaitServesInArrivalOrderWhateverTheAnswersOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{Store: limittest.NewStore(time.Now)}
		l := mustNew(t, store, feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c")
		before, after := make(chan struct{}), make(chan struct{})
		store.holds = []hold{{before: before}, {after: after}}
		first := waitFor(context.Background(), l) // held before the store
		synctest.Wait()
		second := waitFor(context.Background(), l) // reserves 200 ms, its answer held
		synctest.Wait()
		close(before) // the first reserves 400 ms and waits
		synctest.Wait()
		close(after) // the second's answer, 200 ms, arrives last
		d1 := <-first
		at1 := time.Since(start)
		d2 := <-second
		at2 := time.Since(start)
		if !d1.Allowed || !d2.Allowed || at1 != 200*time.Millisecond || at2 != 400*time.Millisecond {
			t.Fatalf("first to arrive served at %v, second at %v; want 200ms, 400ms", at1, at2)
		}
	})
}

// The order of arrival never moves a waiter to a slot past its own bound:
// a later arrival whose deadline comes before the slot the first one
// reserved keeps its earlier slot, and both are served.
func TestMaxWaitArrivalOrderKeepsEachBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{Store: limittest.NewStore(time.Now)}
		l := mustNew(t, store, feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c")
		gate := make(chan struct{})
		store.holds = []hold{{before: gate}}
		first := waitFor(context.Background(), l)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		second := waitFor(ctx, l) // reserves 200 ms, may not wait past 250 ms
		synctest.Wait()
		close(gate)
		d2 := <-second
		at2 := time.Since(start)
		d1 := <-first
		at1 := time.Since(start)
		if !d1.Allowed || !d2.Allowed || at2 != 200*time.Millisecond || at1 != 400*time.Millisecond {
			t.Fatalf("bounded second served at %v (%+v), first at %v (%+v); want 200ms, 400ms", at2, d2, at1, d1)
		}
	})
}

// Nor the one that arrived later, when its earlier slot comes back last:
// it keeps its slot rather than take the first one's, past its deadline.
func TestMaxWaitArrivalOrderKeepsTheLaterOnesBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{Store: limittest.NewStore(time.Now)}
		l := mustNew(t, store, feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c")
		before, after := make(chan struct{}), make(chan struct{})
		store.holds = []hold{{before: before}, {after: after}}
		first := waitFor(context.Background(), l)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		second := waitFor(ctx, l) // reserves 200 ms, may not wait past 250 ms, its answer held
		synctest.Wait()
		close(before) // the first reserves 400 ms and waits
		synctest.Wait()
		close(after)
		d2 := <-second
		at2 := time.Since(start)
		d1 := <-first
		at1 := time.Since(start)
		if !d1.Allowed || !d2.Allowed || at2 != 200*time.Millisecond || at1 != 400*time.Millisecond {
			t.Fatalf("bounded second served at %v (%+v), first at %v (%+v); want 200ms, 400ms", at2, d2.Allowed, at1, d1.Allowed)
		}
	})
}

// A waiter cancelled mid-queue leaves no hole: the waiters after it move
// one slot earlier each, the line's last slot is given back, and the next
// request reserves that slot, so that no two requests are served at one
// instant.
func TestMaxWaitCancelMidQueueLeavesNoHole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c")
		var done []chan limit.Decision
		var cancels []context.CancelFunc
		for range 4 { // slots at 200, 400, 600, 800 ms
			ctx, cancel := context.WithCancel(context.Background())
			cancels = append(cancels, cancel)
			done = append(done, waitFor(ctx, l))
			synctest.Wait()
		}
		defer func() {
			for _, c := range cancels {
				c()
			}
		}()
		time.Sleep(100 * time.Millisecond)
		cancels[1]() // the waiter of 400 ms
		if d := <-done[1]; d.Allowed || d.RetryAfter != 300*time.Millisecond {
			t.Fatalf("cancelled: %+v; want limited, its slot 300ms away", d)
		}
		next := waitFor(context.Background(), l)
		served := map[time.Duration]int{}
		for i, ch := range [](chan limit.Decision){done[0], done[2], done[3], next} {
			d := <-ch
			at := time.Since(start)
			if !d.Allowed {
				t.Fatalf("waiter %d: %+v", i, d)
			}
			served[at]++
			if want := time.Duration(i+1) * 200 * time.Millisecond; at != want {
				t.Fatalf("waiter %d served at %v, want %v (served: %v)", i, at, want, served)
			}
		}
	})
}

// A slot beginning after the context's deadline is not reserved: the
// request is limited at once and the slot stays free.
func TestMaxWaitHonoursTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy())
		l.Consume(context.Background(), "c")
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		if d, _ := l.Consume(ctx, "c"); d.Allowed || d.Waited != 0 || d.RetryAfter != 200*time.Millisecond {
			t.Fatalf("slot at 200 ms, deadline at 150 ms: %+v; want limited at once", d)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel2()
		if d, _ := l.Consume(ctx2, "c"); !d.Allowed || d.Waited != 200*time.Millisecond {
			t.Fatalf("slot at 200 ms, deadline at 250 ms: %+v; want served at its slot", d)
		}
	})
}

// Past MaxWaiting requests waiting at once, a request that would wait is
// limited at once and reserves nothing.
func TestMaxWaitingBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := feedPolicy()
		p.MaxWaiting = 2
		l := mustNew(t, limittest.NewStore(time.Now), p)
		ctx := context.Background()
		l.Consume(ctx, "c")
		for range 2 {
			go l.Consume(ctx, "c")
			synctest.Wait()
		}
		if d, _ := l.Consume(ctx, "c"); d.Allowed || d.Waited != 0 || d.RetryAfter != 600*time.Millisecond {
			t.Fatalf("a third waiter: %+v; want limited at once (RetryAfter 600ms: nothing reserved)", d)
		}
		time.Sleep(time.Second) // the two waiters are served
		if d, _ := l.Consume(ctx, "c"); !d.Allowed {
			t.Fatalf("after the waiters: %+v", d)
		}
	})
}

// A request that waited and was served gets the header fields of any
// admitted request; the handler runs after the wait (CheckHTTP returns
// then).
func TestMaxWaitHeadersAsAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := feedPolicy()
		p.Disclosure = limit.DiscloseAlways
		l := mustNew(t, limittest.NewStore(time.Now), p)
		first := checkHTTP(l, req("192.0.2.1:1", "/v1/feed"))
		start := time.Now()
		second := checkHTTP(l, req("192.0.2.1:1", "/v1/feed"))
		if second.Code != http.StatusOK || time.Since(start) != 200*time.Millisecond {
			t.Fatalf("second request: %d after %v; want admitted after 200ms", second.Code, time.Since(start))
		}
		for _, h := range []string{"Ratelimit-Policy", "Ratelimit"} {
			if first.Header().Get(h) == "" || second.Header().Get(h) == "" {
				t.Fatalf("%s: first %q, waited %q; want the field on both", h, first.Header().Get(h), second.Header().Get(h))
			}
		}
		if second.Header().Get("Retry-After") != "" {
			t.Fatalf("a served request carries Retry-After %q", second.Header().Get("Retry-After"))
		}
	})
}

// refundCounter is a Store that counts the Refunds it is sent.
type refundCounter struct {
	limitstore.Store
	mu      sync.Mutex
	refunds int
}

func (s *refundCounter) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *refundCounter) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	if op.Refund {
		s.mu.Lock()
		s.refunds++
		s.mu.Unlock()
	}
	return limittest.Take(ctx, s.Store, op)
}

func (s *refundCounter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refunds
}

// A reservation whose answer comes back so late that its slot begins
// after the request's deadline is given back at once, in one store call,
// and the request is limited then, not at its deadline: the next request
// reserves the very slot it freed.
func TestMaxWaitSlotPastTheDeadlineIsGivenBackAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refunds := &refundCounter{Store: limittest.NewStore(time.Now)}
		store := &gatedStore{Store: refunds}
		l := mustNew(t, store, feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c") // the burst: the next slot at 200 ms
		after := make(chan struct{})
		store.holds = []hold{{after: after}}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		late := waitFor(ctx, l) // reserves 200 ms (before 250 ms); its answer held
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		close(after) // back at 100 ms: 200 ms more to wait, past the deadline
		d := <-late
		if at := time.Since(start); d.Allowed || d.Outcome != limit.OutcomeLimited || at != 100*time.Millisecond || d.Waited != 0 || d.RetryAfter != 200*time.Millisecond {
			t.Fatalf("slot past the deadline: %+v at %v; want limited at once (100ms), RetryAfter 200ms", d, at)
		}
		if n := refunds.count(); n != 1 {
			t.Fatalf("%d Refunds, want 1", n)
		}
		if d, _ := l.Consume(context.Background(), "c"); !d.Allowed || d.Waited != 100*time.Millisecond {
			t.Fatalf("after the give-back: %+v; want the freed slot, 100ms away", d)
		}
	})
}

// An admission at once whose answer comes back after the request's
// deadline began after it too: it is given back and the request limited,
// as a waiter's slot past its deadline is, so that no request of a
// MaxWait policy goes on past its deadline and the slot it held is not
// lost. One at the deadline is served, as a waiter's is.
func TestMaxWaitAdmissionAtOncePastTheDeadlineIsGivenBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		back    time.Duration // when the store's answer comes back, from the start
		allowed bool
	}{
		{"after the deadline", 100 * time.Millisecond, false},
		{"at the deadline", 50 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				refunds := &refundCounter{Store: limittest.NewStore(time.Now)}
				store := &gatedStore{Store: refunds}
				l := mustNew(t, store, feedPolicy())
				after := make(chan struct{})
				store.holds = []hold{{after: after}}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				late := waitFor(ctx, l) // admitted at once (the burst); its answer held
				synctest.Wait()
				time.Sleep(tc.back)
				close(after)
				d := <-late
				if d.Allowed != tc.allowed || d.Waited != 0 {
					t.Fatalf("answer back at %v, deadline at 50ms: %+v; want allowed %v", tc.back, d, tc.allowed)
				}
				if tc.allowed {
					return
				}
				if d.Outcome != limit.OutcomeLimited || d.RetryAfter != time.Millisecond || refunds.count() != 1 {
					t.Fatalf("past the deadline: %+v after %d Refunds; want limited, RetryAfter 1ms, 1 Refund", d, refunds.count())
				}
				if d, _ := l.Consume(context.Background(), "c"); !d.Allowed || d.Waited != 0 {
					t.Fatalf("after the give-back: %+v; want the burst back, at once", d)
				}
			})
		})
	}
}

// Nor past its deadline or its MaxWait on this process's clock: a slot
// whose answer came back late begins, here, later than the store's clock
// says, and a waiter moved to it could only give it up or wait longer than
// its MaxWait. The later arrival (bounded at 450 ms by the one or the
// other) keeps its slot and both are served.
func TestMaxWaitArrivalOrderKeepsTheLocalBounds(t *testing.T) {
	for _, bound := range []string{"deadline", "MaxWait"} {
		t.Run(bound, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &gatedStore{Store: limittest.NewStore(time.Now)}
				p := feedPolicy()
				ctx := context.Background()
				if bound == "MaxWait" {
					p.MaxWait = 450 * time.Millisecond
				} else {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 450*time.Millisecond)
					defer cancel()
				}
				l := mustNew(t, store, p)
				start := time.Now()
				l.Consume(context.Background(), "c")
				before, after := make(chan struct{}), make(chan struct{})
				store.holds = []hold{{before: before, after: after}}
				first := waitFor(context.Background(), l) // held before the store, then its answer held
				synctest.Wait()
				second := waitFor(ctx, l) // reserves 200 ms; bound about 450 ms on the store's clock
				synctest.Wait()
				close(before) // the first reserves 400 ms at 0 ms
				synctest.Wait()
				time.Sleep(100 * time.Millisecond)
				close(after) // back at 100 ms: its slot is 500 ms here, past the second's bound
				d2 := <-second
				at2 := time.Since(start)
				d1 := <-first
				at1 := time.Since(start)
				if !d1.Allowed || !d2.Allowed || at2 != 200*time.Millisecond || at1 != 500*time.Millisecond {
					t.Fatalf("bounded second served at %v (%+v), first at %v (%+v); want 200ms, 500ms", at2, d2.Allowed, at1, d1.Allowed)
				}
			})
		})
	}
}

// A waiter whose slot begins at its deadline is served then: its context
// reaching the deadline once the slot has begun ends no wait, whichever
// of its timer and its context the waiter hears first.
func TestMaxWaitSlotAtTheDeadlineIsServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{Store: limittest.NewStore(time.Now)}
		l := mustNew(t, store, feedPolicy())
		start := time.Now()
		l.Consume(context.Background(), "c") // the burst: the next slot at 200 ms
		after := make(chan struct{})
		store.holds = []hold{{after: after}}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		w := waitFor(ctx, l) // reserves 200 ms (before 250 ms); its answer held
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		close(after) // back at 50 ms: its slot is 250 ms here, the deadline
		d := <-w
		if at := time.Since(start); !d.Allowed || at != 250*time.Millisecond || d.Waited != 200*time.Millisecond {
			t.Fatalf("slot at the deadline: %+v at %v; want served at 250ms after a wait of 200ms", d, at)
		}
	})
}

// lagStore is a store whose every call takes lag there and back: half of
// it on the way to next, half on the way back (a network round trip;
// exact in a synctest bubble).
type lagStore struct {
	next limitstore.Store
	lag  time.Duration
}

// Take is next's Take, lag/2 later, answered lag/2 after that.
func (s *lagStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *lagStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	time.Sleep(s.lag / 2)
	res, err := limittest.Take(ctx, s.next, op)
	time.Sleep(s.lag - s.lag/2)
	return res, err
}

// admissions runs requests of l on goroutines and records, by name, when
// each returned admitted (ms from start; -1: limited).
type admissions struct {
	l     *limit.Limiter
	start time.Time
	wg    sync.WaitGroup
	mu    sync.Mutex
	at    map[string]time.Duration
}

func newAdmissions(l *limit.Limiter) *admissions {
	return &admissions{l: l, start: time.Now(), at: map[string]time.Duration{}}
}

// ask sends request name of cost n with ctx.
func (a *admissions) ask(name string, n int64, ctx context.Context) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		d, _ := a.l.ConsumeN(ctx, "client", n)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.at[name] = -1
		if d.Allowed {
			a.at[name] = time.Since(a.start)
		}
	}()
}

// sleepTo sleeps until d after the start.
func (a *admissions) sleepTo(d time.Duration) { time.Sleep(d - time.Since(a.start)) }

// A give-back that reaches the store behind a reservation of the same
// Limiter still on its way gives nothing back; the line keeps that slot,
// and the request whose reservation was on its way takes it instead of
// its own later one, which goes back. The cancellations after it, with
// nothing on its way, come back whole: no slot passes unused.
func TestMaxWaitSlotTheStoreKeptGoesToTheNextWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second}
		l := mustNew(t, &lagStore{next: limittest.NewStore(time.Now), lag: 4 * time.Millisecond}, p)
		a := newAdmissions(l)
		a.ask("burst", 1, context.Background())
		time.Sleep(2 * time.Millisecond)
		cancels := map[string]context.CancelFunc{}
		for _, n := range []string{"W1", "W2", "W3", "W4", "W5"} { // slots 100..500 ms
			ctx, cancel := context.WithCancel(context.Background())
			cancels[n] = cancel
			a.ask(n, 1, ctx)
			time.Sleep(2 * time.Millisecond)
		}
		a.sleepTo(20 * time.Millisecond)
		a.ask("D", 1, context.Background()) // reserves 600 ms
		a.sleepTo(21 * time.Millisecond)
		cancels["W5"]() // its Refund reaches the store after D's reservation
		for i, n := range []string{"W4", "W3", "W2"} {
			a.sleepTo(time.Duration(30+10*i) * time.Millisecond)
			cancels[n]()
		}
		a.sleepTo(60 * time.Millisecond)
		a.ask("E", 1, context.Background())
		a.wg.Wait()
		want := map[string]time.Duration{"burst": 4, "W1": 104, "W2": -1, "W3": -1, "W4": -1, "W5": -1, "D": 204, "E": 304}
		for n, ms := range want {
			if ms > 0 {
				ms *= time.Millisecond
			}
			if got := a.at[n]; got != ms {
				t.Errorf("%s: admitted at %v, want %v (-1: limited); all: %v", n, got, ms, a.at)
			}
		}
	})
}

// Waiters that give up at one instant return after one store call at
// most, whatever the number; the slots the store could not take back yet
// go to the next request, which waits only for the first of them.
func TestMaxWaitCancelStormReturnsAtOnceAndServesTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lag = 5 * time.Millisecond
		p := limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1, MaxWait: time.Minute}
		l := mustNew(t, &lagStore{next: limittest.NewStore(time.Now), lag: lag}, p)
		l.Consume(context.Background(), "client") // the burst
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		var worst time.Duration
		var at time.Time
		for range 200 { // slots 100 ms .. 20 s
			wg.Add(1)
			go func() {
				defer wg.Done()
				if d, _ := l.Consume(ctx, "client"); d.Allowed {
					t.Errorf("cancelled, admitted: %+v", d)
				}
				mu.Lock()
				worst = max(worst, time.Since(at))
				mu.Unlock()
			}()
		}
		time.Sleep(50 * time.Millisecond)
		at = time.Now()
		cancel()
		wg.Wait()
		if worst > lag {
			t.Errorf("a cancelled waiter returned %v after the cancel, want at most one store call (%v)", worst, lag)
		}
		time.Sleep(100 * time.Millisecond)
		// Sent at 155 ms, answered at 160 ms: the slot at 200 ms is the
		// first one kept that has not passed.
		d, _ := l.Consume(context.Background(), "client")
		if want := 40 * time.Millisecond; !d.Allowed || d.Waited != want {
			t.Errorf("the next request: allowed %v after %v, want admitted after %v", d.Allowed, d.Waited, want)
		}
	})
}

// A waiter that gives up behind a reservation of another cost (another
// line of the same Limiter) gives nothing back in the store; its slot
// goes to the next request of its cost.
func TestMaxWaitSlotKeptBehindAnotherCostGoesToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 3, MaxWait: 2 * time.Second}
		l := mustNew(t, limittest.NewStore(time.Now), p)
		a := newAdmissions(l)
		a.ask("burst", 3, context.Background())
		synctest.Wait()
		a.ask("A", 1, context.Background()) // 100 ms
		synctest.Wait()
		ctxB, cancelB := context.WithCancel(context.Background())
		a.ask("B", 1, ctxB) // 200 ms
		synctest.Wait()
		a.ask("C", 2, context.Background()) // 400 ms
		synctest.Wait()
		a.sleepTo(50 * time.Millisecond)
		cancelB()
		synctest.Wait()
		a.ask("E", 1, context.Background()) // reserves 500 ms, takes 200 ms
		a.wg.Wait()
		want := map[string]time.Duration{"burst": 0, "A": 100, "B": -1, "C": 400, "E": 200}
		for n, ms := range want {
			if ms > 0 {
				ms *= time.Millisecond
			}
			if got := a.at[n]; got != ms {
				t.Errorf("%s: admitted at %v, want %v (-1: limited); all: %v", n, got, ms, a.at)
			}
		}
	})
}

// A slot kept behind another process's reservation goes to this
// Limiter's next request, never to anyone else: the store's TAT is not
// moved under the other process's slot, and every slot is used once.
func TestMaxWaitSlotKeptBehindAnotherProcessIsUsedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second}
		store := limittest.NewStore(time.Now)
		a1, a2 := newAdmissions(mustNew(t, store, p)), newAdmissions(mustNew(t, store, p))
		a1.ask("burst", 1, context.Background())
		synctest.Wait()
		ctxA, cancelA := context.WithCancel(context.Background())
		a1.ask("A", 1, ctxA) // 100 ms
		synctest.Wait()
		a2.ask("B", 1, context.Background()) // 200 ms, the other process
		synctest.Wait()
		a1.sleepTo(50 * time.Millisecond)
		cancelA() // behind B: nothing comes back, the slot stays this Limiter's
		synctest.Wait()
		a1.ask("C", 1, context.Background()) // reserves 300 ms, takes 100 ms, gives 300 ms back
		synctest.Wait()
		a2.ask("X", 1, context.Background()) // 300 ms again
		a1.wg.Wait()
		a2.wg.Wait()
		got := map[string]time.Duration{}
		maps.Copy(got, a1.at)
		maps.Copy(got, a2.at)
		want := map[string]time.Duration{"burst": 0, "A": -1, "C": 100, "B": 200, "X": 300}
		for n, ms := range want {
			if ms > 0 {
				ms *= time.Millisecond
			}
			if got[n] != ms {
				t.Errorf("%s: admitted at %v, want %v (-1: limited); all: %v", n, got[n], ms, got)
			}
		}
	})
}

// waitBlockPolicy is a token bucket of 1 per 2 s, burst 1, whose requests
// wait up to 3 s for a slot, and which counts failures only and blocks an
// identity for 10 s when a request is limited while none of its charges
// is unsettled (lease periods of 1 s).
func waitBlockPolicy() limit.Policy {
	return limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 1, Window: 2 * time.Second, Burst: 1,
		MaxWait: 3 * time.Second, BlockFor: 10 * time.Second, Lease: time.Second,
		CountStatus: func(status int) bool { return status >= 400 }}
}

// spentProcesses returns two Limiters of waitBlockPolicy with MaxWait
// maxWait on one store (two processes), the burst spent by a counted
// request: the next slot at 2 s. It runs in a synctest bubble.
func spentProcesses(t *testing.T, maxWait time.Duration) (l, other *limit.Limiter) {
	store := limittest.NewStore(time.Now)
	p := waitBlockPolicy()
	p.MaxWait = maxWait
	l, other = mustNew(t, store, p), mustNew(t, store, p)
	first, _ := l.Consume(context.Background(), "c")
	l.Finish(context.Background(), &first, 500)
	return l, other
}

// A waiter that gives up settles its own unsettled charge, not the one of
// the waiter that moves to its slot: that one's charge, counted in a later
// lease period, stays unsettled until its Finish, and a request limited
// meanwhile begins no block.
func TestMaxWaitGiveUpSettlesItsOwnCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, limittest.NewStore(time.Now), waitBlockPolicy())
		ctx := context.Background()
		first, _ := l.Consume(ctx, "c") // the burst: the next slot at 2 s
		l.Finish(ctx, &first, 500)      // counted
		time.Sleep(500 * time.Millisecond)
		ctxA, cancelA := context.WithCancel(ctx)
		a := waitFor(ctxA, l) // slot at 2 s, charged in lease period 0
		synctest.Wait()
		time.Sleep(time.Second)
		b := waitFor(ctx, l) // slot at 4 s, charged in lease period 1
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		cancelA() // b moves to 2 s; the slot at 4 s goes back
		if d := <-a; d.Allowed {
			t.Fatalf("cancelled waiter: %+v", d)
		}
		db := <-b
		if !db.Allowed || db.Waited != 500*time.Millisecond {
			t.Fatalf("second waiter: %+v; want served at 2 s", db)
		}
		time.Sleep(200 * time.Millisecond)
		short, cancel := context.WithTimeout(ctx, time.Millisecond) // too short to wait
		defer cancel()
		if d, _ := l.Consume(short, "c"); d.Allowed || d.Blocked {
			t.Fatalf("limited while the second waiter's charge is unsettled: %+v; want limited, no block", d)
		}
		l.Finish(ctx, &db, 200) // given back
		if d, _ := l.Consume(ctx, "c"); !d.Allowed || d.Waited != 0 {
			t.Fatalf("after the success is given back: %+v; want admitted at once", d)
		}
	})
}

// So too when the store keeps the slot given back (a later reservation of
// another process follows it): the give-up settles its own charge then,
// and the slot kept, taken later by a waiter whose own slot goes back
// instead, settles nobody's charge a second time.
func TestMaxWaitKeptSlotSettlesNoChargeTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, other := spentProcesses(t, 5*time.Second)
		ctx := context.Background()
		time.Sleep(500 * time.Millisecond)
		ctxA, cancelA := context.WithCancel(ctx)
		a := waitFor(ctxA, l) // slot at 2 s
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		e := waitFor(ctx, other) // slot at 4 s, after a's: the store keeps a's
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		cancelA()
		if d := <-a; d.Allowed {
			t.Fatalf("cancelled waiter: %+v", d)
		}
		time.Sleep(800 * time.Millisecond)
		j := waitFor(ctx, l) // reserves 6 s (lease period 1), takes the kept slot at 2 s
		synctest.Wait()
		dj := <-j
		if !dj.Allowed || dj.Waited != 500*time.Millisecond {
			t.Fatalf("the waiter that joins: %+v; want served at the kept slot, 2 s", dj)
		}
		time.Sleep(200 * time.Millisecond)
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		if d, _ := l.Consume(short, "c"); d.Allowed || d.Blocked {
			t.Fatalf("limited while the joiner's charge is unsettled: %+v; want limited, no block", d)
		}
		<-e
	})
}

// A waiter that gives up while its line's latest spare is one the store
// kept (a later reservation of another process follows it) gives no slot
// back, and settles its own charge all the same: with every request given
// up or finished, a counted denial begins a block.
func TestMaxWaitGiveUpBehindAKeptSpareSettlesItsCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, other := spentProcesses(t, 7*time.Second)
		ctx := context.Background()
		ctxA, cancelA := context.WithCancel(ctx)
		a := waitFor(ctxA, l) // 2 s
		synctest.Wait()
		ctxB, cancelB := context.WithCancel(ctx)
		b := waitFor(ctxB, l) // 4 s
		synctest.Wait()
		ctxE, cancelE := context.WithCancel(ctx)
		e := waitFor(ctxE, other) // 6 s
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		cancelA() // b moves to 2 s; 4 s goes back, kept behind e's: a's charge settled
		if d := <-a; d.Allowed {
			t.Fatalf("a: %+v", d)
		}
		cancelB() // the line's latest spare is the kept one: no Refund
		if d := <-b; d.Allowed {
			t.Fatalf("b: %+v", d)
		}
		cancelE() // e gives its own slot back, settling its own charge
		if d := <-e; d.Allowed {
			t.Fatalf("e: %+v", d)
		}
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		// Nothing admitted is in flight: a counted denial begins a block.
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		if d, _ := l.Consume(short, "c"); d.Allowed || !d.Blocked {
			t.Fatalf("a denial with no request in flight: %+v; want a block (every charge settled)", d)
		}
	})
}

// So too for a waiter that gives up while a Refund of its line is under
// way (the waiters give up together).
func TestMaxWaitGiveUpDuringARefundSettlesItsCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := waitBlockPolicy()
		p.MaxWait = 5 * time.Second
		// The first Refund (the burst's Finish) at once, the next one 4 ms.
		l := mustNew(t, &slowRefundStore{Store: limittest.NewStore(time.Now), refundLag: []time.Duration{0, 4 * time.Millisecond}}, p)
		ctx := context.Background()
		first, _ := l.Consume(ctx, "c")
		l.Finish(ctx, &first, 500)
		cctx, cancelAll := context.WithCancel(ctx)
		a := waitFor(cctx, l) // 2 s
		synctest.Wait()
		b := waitFor(cctx, l) // 4 s
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		cancelAll() // the first to leave gives a spare back (4 ms); the second leaves meanwhile
		<-a
		<-b
		time.Sleep(100 * time.Millisecond)
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond) // too short to wait for 2 s
		defer cancel()
		if d, _ := l.Consume(short, "c"); d.Allowed || !d.Blocked {
			t.Fatalf("a denial with no request in flight: %+v; want a block (every charge settled)", d)
		}
	})
}

// slowRefundStore answers its Refunds after the delays in refundLag, in
// order (none left: at once), or at its context's end with its error (the
// Refund done meanwhile), as the Store contract asks; other calls at once.
type slowRefundStore struct {
	*limittest.Store
	mu        sync.Mutex
	refundLag []time.Duration
}

func (s *slowRefundStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) error {
	var lag time.Duration
	if op.Refund {
		s.mu.Lock()
		if len(s.refundLag) > 0 {
			lag, s.refundLag = s.refundLag[0], s.refundLag[1:]
		}
		s.mu.Unlock()
	}
	err := s.Store.Take(ctx, op, res)
	select {
	case <-time.After(lag):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A waiter that gives its line's spares back while it waits goes on at its
// slot however slow the store: the Refund under way then (100 ms here,
// guard's DefaultTimeout) is given up, and the waiter returns at its
// slot, before its context's deadline.
func TestMaxWaitHelperIsNotHeldPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 ms for the first Refund (the line learns that), 100 ms for the next.
		store := &slowRefundStore{Store: limittest.NewStore(time.Now), refundLag: []time.Duration{time.Millisecond, 100 * time.Millisecond}}
		l := mustNew(t, store, feedPolicy()) // one slot per 200 ms, MaxWait 2 s
		start := time.Now()
		l.Consume(context.Background(), "c") // the burst
		ctxD, cancelD := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancelD()
		d := waitFor(ctxD, l) // 200 ms, deadline 250 ms
		synctest.Wait()
		ctxE, cancelE := context.WithCancel(context.Background())
		e := waitFor(ctxE, l) // 400 ms
		synctest.Wait()
		f := waitFor(ctxE, l) // 600 ms
		synctest.Wait()
		time.Sleep(190 * time.Millisecond)
		// The first to leave gives 600 ms back (1 ms); the second leaves
		// meanwhile, and d, 9 ms before its slot, gives 400 ms back.
		cancelE()
		<-e
		<-f
		dd := <-d
		if at := time.Since(start); dd.Allowed && at > 250*time.Millisecond {
			t.Fatalf("d returned admitted at %v, past its deadline (250ms); its slot began at 200ms (Waited %v)", at, dd.Waited)
		}
	})
}

// The helper Refund a waiter ends itself when it goes on (see
// TestMaxWaitHelperIsNotHeldPastItsDeadline) is no store failure: no
// StoreError event, no failure log.
func TestMaxWaitHelperCancelIsNoStoreError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowRefundStore{Store: limittest.NewStore(time.Now), refundLag: []time.Duration{time.Millisecond, 100 * time.Millisecond}}
		rec := &limittest.Recorder{}
		l := mustNew(t, store, feedPolicy(), limit.WithObserver(rec))
		l.Consume(context.Background(), "c")
		ctxD, cancelD := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancelD()
		d := waitFor(ctxD, l)
		synctest.Wait()
		ctxE, cancelE := context.WithCancel(context.Background())
		e := waitFor(ctxE, l)
		synctest.Wait()
		f := waitFor(ctxE, l)
		synctest.Wait()
		time.Sleep(190 * time.Millisecond)
		cancelE()
		<-e
		<-f
		<-d
		if n := rec.StoreErrors(); n != 0 {
			t.Fatalf("%d StoreError events, want 0: the only failed call is the helper Refund the waiter ended", n)
		}
	})
}
