package limit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

func concurrencyPolicy(n int64) limit.Policy {
	return limit.Policy{Algorithm: limit.Concurrency, Limit: n, Lease: time.Second}
}

func TestConcurrencyConstructionErrorsNameTheField(t *testing.T) {
	s := storeAt(epochMS)
	for _, c := range []struct {
		field string
		p     limit.Policy
	}{
		{"Limit", limit.Policy{Algorithm: limit.Concurrency}},
		{"Limit", limit.Policy{Algorithm: limit.Concurrency, Limit: -1}},
		{"Limit", limit.Policy{Algorithm: limit.Concurrency, Limit: 1_000_000}},
		{"Window", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Window: time.Minute}},
		{"Burst", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Burst: 3}},
		{"Per", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Per: limit.Day}},
		{"Quotas", limit.Policy{Algorithm: limit.Concurrency, Quotas: []limit.Rate{{Limit: 1, Window: time.Second}}, Limit: 2}},
		{"AlignWindows", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, AlignWindows: true}},
		{"MaxWait", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, MaxWait: time.Second}},
		{"CountStatus", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, CountStatus: func(int) bool { return true }}},
		{"Lease", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Lease: 99 * time.Millisecond}},
		{"Lease", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Lease: 25 * time.Hour}},
		{"Lease", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Lease: -time.Second}},
		{"Lease", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Lease: time.Second + time.Microsecond}},
		{"Cost", limit.Policy{Algorithm: limit.Concurrency, Limit: 2, Cost: 3}},
	} {
		_, err := limit.New(s, c.p)
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want ErrInvalidPolicy naming %s", c.field, err, c.field)
		}
	}
	// A store that keeps no slots.
	if _, err := limit.New(limittest.FailingStore{}, concurrencyPolicy(2)); !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "Leaser") {
		t.Errorf("store without slots: error %v, want ErrInvalidOption naming Leaser", err)
	}
}

func TestConcurrencyConsumeTakesSlotsAndFinishGivesThemBack(t *testing.T) {
	ctx := context.Background()
	s := storeAt(epochMS)
	l := mustNew(t, s, concurrencyPolicy(2))
	a, _ := l.Consume(ctx, "alice")
	b, _ := l.Consume(ctx, "alice")
	c, _ := l.Consume(ctx, "alice")
	if !a.Allowed || !b.Allowed || c.Allowed {
		t.Fatalf("allowed %v %v %v, want true true false", a.Allowed, b.Allowed, c.Allowed)
	}
	if c.RetryAfter != time.Second || c.Outcome != limit.OutcomeLimited || c.Limit != 2 {
		t.Fatalf("full: RetryAfter %v Outcome %s Limit %d, want 1s limited 2", c.RetryAfter, c.Outcome, c.Limit)
	}
	if o, _ := l.Consume(ctx, "bob"); !o.Allowed {
		t.Fatal("another identity has its own slots")
	}
	l.Finish(ctx, &a, 0)
	if d, _ := l.Consume(ctx, "alice"); !d.Allowed {
		t.Fatal("a slot given back is free again")
	}
	// ConsumeN takes n slots: one is left after Finish(b)... none: b and
	// the last one hold both.
	if d, _ := l.ConsumeN(ctx, "carol", 2); !d.Allowed {
		t.Fatal("ConsumeN(2) fits Limit 2")
	}
	if d, _ := l.ConsumeN(ctx, "carol", 1); d.Allowed {
		t.Fatal("ConsumeN(2) took both slots")
	}
	if d, _ := l.ConsumeN(ctx, "dave", 3); d.Allowed || !d.OverCapacity {
		t.Fatalf("ConsumeN(3) over Limit 2: %+v, want OverCapacity", d)
	}
}

// Finishing a Decision twice (or a copy of it), after its lease expired and
// its slot went to another holder, or with another Limiter, frees nothing
// the request does not hold.
func TestConcurrencyReleaseEdgeCases(t *testing.T) {
	ctx := context.Background()
	s := storeAt(epochMS)
	l := mustNew(t, s, concurrencyPolicy(1))
	other := mustNew(t, s, limit.Policy{Name: "other", Algorithm: limit.Concurrency, Limit: 1, Lease: time.Second})

	a, _ := l.Consume(ctx, "k")
	copyOfA := a
	l.Finish(ctx, &a, 0)
	b, _ := l.Consume(ctx, "k") // the slot goes to b
	if !b.Allowed {
		t.Fatal("slot not free after Finish")
	}
	l.Finish(ctx, &a, 0)       // twice
	l.Finish(ctx, &copyOfA, 0) // a copy of the first hold
	other.Finish(ctx, &b, 0)   // another Limiter
	if d, _ := l.Consume(ctx, "k"); d.Allowed {
		t.Fatal("a double release freed b's slot")
	}

	// Release after expiry: b's holder vanishes (no renewal runs within
	// the fake clock's jump); c takes the slot; b's late Finish frees
	// nothing of c's.
	s.advance(1001)
	c, _ := l.Consume(ctx, "k")
	if !c.Allowed {
		t.Fatal("an expired lease still holds its slot")
	}
	l.Finish(ctx, &b, 0)
	if d, _ := l.Consume(ctx, "k"); d.Allowed {
		t.Fatal("a release after expiry freed another holder's slot")
	}
	l.Finish(ctx, &c, 0)
	if d, _ := l.Consume(ctx, "k"); !d.Allowed {
		t.Fatal("c's slot not given back")
	}
}

// A release by another process: a Leaser call with another holder's token
// never frees a slot.
func TestConcurrencyForeignTokenFreesNothing(t *testing.T) {
	ctx := context.Background()
	s := storeAt(epochMS)
	op := limitstore.LeaseOp{Key: []byte("q:{t}:c"), Cost: 1, Limit: 1, LeaseMS: 1000}
	op.Token[0] = 1
	if res, _ := s.Acquire(ctx, &op); !res.Allowed {
		t.Fatal("first acquire denied")
	}
	foreign := op
	foreign.Token[0] = 2
	if freed, _ := s.Release(ctx, &foreign); freed {
		t.Fatal("a foreign token freed a slot")
	}
	if res, _ := s.Acquire(ctx, &foreign); res.Allowed {
		t.Fatal("the slot is held: a foreign token must be denied")
	}
}

func TestConcurrencyResponseHasRetryAfterAndNoRateLimitFields(t *testing.T) {
	for _, disc := range []limit.Disclosure{limit.DiscloseRetryAfter, limit.DiscloseAlways, limit.DiscloseNone} {
		s := storeAt(epochMS)
		p := concurrencyPolicy(1)
		p.Disclosure = disc
		p.HeaderStyle = limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
		l := mustNew(t, s, p)
		first := checkHTTP(l, req("192.0.2.1:1", "/slow"))
		if first.Code != http.StatusOK || len(first.Header()) != 0 {
			t.Fatalf("disclosure %d: first %d %v, want 200 with no fields", disc, first.Code, first.Header())
		}
		w := checkHTTP(l, req("192.0.2.1:2", "/slow"))
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("disclosure %d: status %d, want 429", disc, w.Code)
		}
		for name := range w.Header() {
			if strings.Contains(strings.ToLower(name), "ratelimit") {
				t.Errorf("disclosure %d: %s sent: a concurrency limit is not a rate", disc, name)
			}
		}
		if disc == limit.DiscloseNone {
			if w.Header().Get("Retry-After") != "" || w.Body.Len() != 0 {
				t.Errorf("DiscloseNone: Retry-After %q body %q, want none", w.Header().Get("Retry-After"), w.Body)
			}
			continue
		}
		if got := w.Header().Get("Retry-After"); got != "1" {
			t.Errorf("disclosure %d: Retry-After %q, want 1", disc, got)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(w.Body.String(), `"status":429`) {
			t.Errorf("disclosure %d: %s %s, want an RFC 9457 body", disc, ct, w.Body)
		}
	}
}

// HTTPHandler gives the slot back when the handler returns and when it
// panics.
func TestConcurrencyHTTPHandlerReleasesOnReturnAndPanic(t *testing.T) {
	s := storeAt(epochMS)
	l := mustNew(t, s, concurrencyPolicy(1))
	h := l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
	}), nil, nil)
	serve := func(path string) (code int, panicked bool) {
		defer func() { panicked = recover() != nil }()
		return serveRec(h, "GET", path).Code, false
	}
	for i := range 3 {
		if code, _ := serve("/ok"); code != 200 {
			t.Fatalf("request %d: %d, want 200: the slot was not given back", i, code)
		}
		if _, panicked := serve("/panic"); !panicked {
			t.Fatal("the panic must go on up")
		}
	}
	if code, _ := serve("/ok"); code != 200 {
		t.Fatalf("after panics: %d, want 200: a panicking handler kept its slot", code)
	}
}

// Stacked with a rate mount, a request holds its slot and has its rate
// charged, or neither: a full concurrency mount inside refunds the rate
// mount's charge, a rate mount inside that limits gives the slot back.
func TestConcurrencyStackedWithRate(t *testing.T) {
	s := storeAt(epochMS)
	rate := mustNew(t, s, limit.Policy{Name: "rate", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, AlignWindows: true})
	conc := mustNew(t, s, limit.Policy{Name: "conc", Algorithm: limit.Concurrency, Limit: 1, Lease: time.Second})
	release := make(chan struct{})
	entered := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
	})
	h := rate.HTTPHandler(conc.HTTPHandler(slow, nil, nil), nil, nil)
	done := make(chan int)
	go func() { done <- serveRec(h, "GET", "/hold").Code }()
	<-entered
	// The slot is held: 5 refusals by the concurrency mount charge the
	// rate mount nothing.
	for range 5 {
		if code := serveRec(h, "GET", "/x").Code; code != 429 {
			t.Fatalf("concurrency full: %d, want 429", code)
		}
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	// Rate: 1 used, 2 left.
	for i := range 2 {
		if code := serveRec(h, "GET", "/x").Code; code != 200 {
			t.Fatalf("request %d: %d, want 200 (refused requests were charged)", i, code)
		}
	}
	// Rate exhausted: the concurrency mount inside it is never reached,
	// and with the order swapped (rate inside), its slot is given back.
	inner := limittest.MustNew(s, limit.Policy{Name: "inner", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true})
	h2 := conc.HTTPHandler(inner.HTTPHandler(slow, nil, nil), nil, nil)
	codes := []int{}
	for range 3 {
		codes = append(codes, serveRec(h2, "GET", "/x").Code)
	}
	if codes[0] != 200 || codes[1] != 429 || codes[2] != 429 {
		t.Fatalf("codes %v, want 200 429 429", codes)
	}
	if d, _ := conc.Consume(context.Background(), "192.0.2.1"); !d.Allowed {
		t.Fatal("a request the inner rate mount limited kept its slot")
	}
}

// The store's exactness, through the engine: 1 000 goroutines on one
// identity with Limit 10 never have more than 10 holders at once.
func TestConcurrencyExactOnTheReferenceStore(t *testing.T) {
	s := limittest.NewStore(nil)
	p := limit.Policy{Algorithm: limit.Concurrency, Limit: 10}
	l := mustNew(t, s, p)
	var mu sync.Mutex
	in, peak, served := 0, 0, 0
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			for range 5 {
				d, _ := l.Consume(context.Background(), "k")
				if !d.Allowed {
					continue
				}
				mu.Lock()
				in++
				peak = max(peak, in)
				served++
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				in--
				mu.Unlock()
				l.Finish(context.Background(), &d, 0)
			}
		})
	}
	wg.Wait()
	if peak > 10 || peak == 0 {
		t.Fatalf("peak %d holders, want 1..10", peak)
	}
	if s.Held(heldKey(t, p)) != 0 {
		t.Fatal("slots left held after the load")
	}
	t.Logf("peak %d, served %d of 5000", peak, served)
}

// heldKey finds the store key of identity "k" by taking and giving back a
// slot through a recording store.
func heldKey(t *testing.T, p limit.Policy) string {
	t.Helper()
	rec := &keyRecorder{Store: limittest.NewStore(nil)}
	l2 := mustNew(t, rec, p)
	d, _ := l2.Consume(context.Background(), "k")
	l2.Finish(context.Background(), &d, 0)
	return rec.key
}

type keyRecorder struct {
	*limittest.Store
	key string
}

func (r *keyRecorder) Acquire(ctx context.Context, op *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	r.key = string(op.Key)
	return r.Store.Acquire(ctx, op)
}

// A slot's key is the identity's, in one hash tag, with the policy's
// signature: bucket "10p10c" is 10 slots with a 10 s lease; the record
// "p10c" (the lease and the algorithm: a Limit changed under one Name
// keeps the slots held).
func TestConcurrencyKeyAndBucket(t *testing.T) {
	p := limit.Policy{Algorithm: limit.Concurrency, Limit: 10}
	l := mustNew(t, limittest.NewStore(nil), p)
	key := heldKey(t, p)
	if !strings.HasPrefix(key, "quotagate:{") || !strings.HasSuffix(key, "}:10p10c:p10c:r:k=k") {
		t.Fatalf("key %q", key)
	}
	d, _ := l.Consume(context.Background(), "x")
	if d.Bucket != "10p10c" {
		t.Fatalf("bucket %q, want 10p10c", d.Bucket)
	}
}

// failingLeaser is a Leaser whose every call fails.
type failingLeaser struct{ limittest.FailingStore }

func (failingLeaser) Acquire(context.Context, *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	return limitstore.LeaseResult{}, limittest.ErrDown
}

func (failingLeaser) Release(context.Context, *limitstore.LeaseOp) (bool, error) {
	return false, limittest.ErrDown
}

// A store failure applies the FailureMode: FailOpen admits holding
// nothing, FailClosed answers 503, FailLocal takes the slot in the local
// store.
func TestConcurrencyStoreFailureAppliesTheFailureMode(t *testing.T) {
	ctx := context.Background()
	open := mustNew(t, failingLeaser{}, concurrencyPolicy(1))
	for range 3 {
		d, err := open.Consume(ctx, "k")
		if !d.Allowed || d.Outcome != limit.OutcomeDegraded || err == nil {
			t.Fatalf("FailOpen: %+v %v, want degraded", d, err)
		}
		open.Finish(ctx, &d, 0)
	}
	p := concurrencyPolicy(1)
	p.FailureMode = limit.FailClosed
	closed := mustNew(t, failingLeaser{}, p)
	if w := checkHTTP(closed, req("192.0.2.1:1", "/")); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("FailClosed: %d, want 503", w.Code)
	}
	p.FailureMode = limit.FailLocal
	local := storeAt(epochMS)
	l := mustNew(t, failingLeaser{}, p, limit.WithLocalStore(local))
	a, _ := l.Consume(ctx, "k")
	b, _ := l.Consume(ctx, "k")
	if !a.Allowed || a.Outcome != limit.OutcomeDegraded || b.Allowed {
		t.Fatalf("FailLocal: %v %s, %v: want the local store's one slot", a.Allowed, a.Outcome, b.Allowed)
	}
	l.Finish(ctx, &a, 0)
	if c, _ := l.Consume(ctx, "k"); !c.Allowed {
		t.Fatal("FailLocal: the local slot was not given back")
	}
}

// Peek and Reset are for rate quotas: a Concurrency Limiter refuses them.
func TestConcurrencyPeekAndResetUnsupported(t *testing.T) {
	l := mustNew(t, storeAt(epochMS), concurrencyPolicy(2))
	if _, err := l.Peek(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Peek: %v, want ErrUnsupported", err)
	}
	if err := l.Reset(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset: %v, want ErrUnsupported", err)
	}
}

// lostReplyLeaser runs each Acquire in its store, then answers as a store
// whose reply came too late: the caller's context error, or the store's
// own deadline. Releases are counted.
type lostReplyLeaser struct {
	*limittest.Store
	lose     atomic.Bool
	released chan limitstore.LeaseOp
}

func (s *lostReplyLeaser) Acquire(ctx context.Context, op *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	res, err := s.Store.Acquire(ctx, op)
	if s.lose.Load() {
		return limitstore.LeaseResult{}, context.DeadlineExceeded
	}
	return res, err
}

func (s *lostReplyLeaser) Release(ctx context.Context, op *limitstore.LeaseOp) (bool, error) {
	ok, err := s.Store.Release(ctx, op)
	s.released <- *op
	return ok, err
}

// A caller that went away, or whose deadline passed, is admitted by no
// FailureMode, as for a rate quota: cancelling a request must not get it
// past a full Concurrency limit.
func TestConcurrencyCallerThatEndedIsNeverAdmitted(t *testing.T) {
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			s := &lostReplyLeaser{Store: storeAt(epochMS).Store, released: make(chan limitstore.LeaseOp, 8)}
			p := concurrencyPolicy(1)
			p.FailureMode = mode
			var opts []limit.Option
			if mode == limit.FailLocal {
				opts = append(opts, limit.WithLocalStore(storeAt(epochMS)))
			}
			l := mustNew(t, s, p, opts...)
			held, _ := l.Consume(context.Background(), "k")
			if !held.Allowed {
				t.Fatal("the first request holds the slot")
			}
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			s.lose.Store(true)
			late, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer stop()
			for name, ctx := range map[string]context.Context{"cancelled": gone, "past its deadline": late} {
				d, err := l.Consume(ctx, "k")
				if d.Allowed || d.Outcome != limit.OutcomeLimited || err == nil {
					t.Errorf("a caller %s: %+v, %v; want limited, whatever the FailureMode", name, d, err)
				}
			}
		})
	}
}

// An Acquire whose reply never came may have taken its slots in the store:
// they are given back (a Release of its token) instead of being held by no
// one for a whole Lease.
func TestConcurrencyAcquireWithoutReplyIsReleased(t *testing.T) {
	s := &lostReplyLeaser{Store: storeAt(epochMS).Store, released: make(chan limitstore.LeaseOp, 8)}
	l := mustNew(t, s, concurrencyPolicy(1))
	s.lose.Store(true)
	d, err := l.Consume(context.Background(), "k") // the store took the slot; the reply was lost
	if !d.Allowed || d.Outcome != limit.OutcomeDegraded || err == nil {
		t.Fatalf("FailOpen on a lost reply: %+v, %v; want degraded", d, err)
	}
	l.Finish(context.Background(), &d, 0)
	select {
	case <-s.released:
	case <-time.After(5 * time.Second):
		t.Fatal("the lost Acquire's slot was never released")
	}
	s.lose.Store(false)
	if d, _ := l.Consume(context.Background(), "k"); !d.Allowed {
		t.Fatalf("after the release: %+v; want the slot free", d)
	}
}
