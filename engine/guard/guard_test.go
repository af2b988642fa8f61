package guard_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The wrapper against fake stores (helpers_test.go): its Take here; the
// shared deadline and what it measures in deadline_test.go, the circuit
// breaker in breaker_test.go, the local deny cache in denycache_test.go.
// Timing runs on synctest's fake clock: every duration is exact.

// A guarded call allocates nothing per decision: the store context is
// pooled and the deadline is shared by the calls of a tick (synctest's clock
// stands still while the loop runs, so every call is in one tick; at real
// rates a tick's few allocations are shared by every call that starts
// within 1 ms). A cached denial allocates nothing either.
func TestTakeAllocationFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := guarded(t, ioStore(nil))
		l := mustNew(t, store, limit.Policy{Limit: 1_000_000_000})
		r := req("192.0.2.1:1", "/")
		w := limittest.Discard
		assertNoAllocs(t, l, func() { l.Check(context.Background(), r, w) })
		denied := mustNew(t, store, limit.Policy{Name: "denied", Limit: 1})
		denied.Check(context.Background(), r, w)
		denied.Check(context.Background(), r, w) // the store's denial: cached
		assertNoAllocs(t, denied, func() {
			if d := denied.Check(context.Background(), r, w); d.Allowed {
				t.Fatal("admitted")
			}
		})
	})
}

// Wrapping a store that keeps Claims keeps its check: a second unnamed
// Limiter with the same numbers is refused through the wrapper, and
// through the bare store too (one record).
func TestWrapperKeepsTheStoresClaims(t *testing.T) {
	inner := &struct {
		*limittest.Store
		limitstore.Claims
	}{Store: limittest.NewStore(nil)}
	g := guarded(t, inner)
	p := limit.Policy{Limit: 5}
	mustNew(t, g, p)
	if _, err := limit.New(g, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("second unnamed Limiter through the wrapper: %v, want the refusal", err)
	}
	if _, err := limit.New(inner, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("second unnamed Limiter on the bare store: %v, want the refusal", err)
	}
	mustNew(t, guarded(t, limittest.NewStore(nil)), p) // no Claims inside: not checked
	mustNew(t, guarded(t, limittest.NewStore(nil)), p)
}

// TestPeekAndResetThroughTheGuard: a Peek is never answered by the deny
// cache (the store is asked each time) and never fills it; a Reset drops
// the cached denials of its keys, so the next request reaches the store and
// is admitted; both fail with the store's error behind an open breaker, and
// with errors.ErrUnsupported when the wrapped store has no Reset.
func TestPeekAndResetThroughTheGuard(t *testing.T) {
	ctx := context.Background()
	ref := ioStore(nil)
	flaky := &limittest.FlakyStore{Store: ref}
	g := guarded(t, flaky)
	l := mustNew(t, g, limit.Policy{Limit: 1, Window: time.Hour})
	for range 2 {
		check(l, ctx, req("192.0.2.1:1", "/"))
	}
	calls := flaky.Calls()
	if d := check(l, ctx, req("192.0.2.1:1", "/")).Decision; d.Allowed || flaky.Calls() != calls {
		t.Fatalf("the denial was not cached: %+v, %d calls", d, flaky.Calls()-calls)
	}
	for range 3 {
		if d, err := l.Peek(ctx, "192.0.2.1"); err != nil || d.Allowed {
			t.Fatalf("Peek: %+v, %v", d, err)
		}
	}
	if n := flaky.Calls() - calls; n != 3 {
		t.Fatalf("3 Peeks made %d store calls, want 3 (the deny cache answers no Peek)", n)
	}
	if err := l.Reset(ctx, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if d := check(l, ctx, req("192.0.2.1:1", "/")).Decision; !d.Allowed {
		t.Fatalf("after Reset the cached denial answered: %+v", d)
	}
	flaky.Fail()
	if _, err := l.Peek(ctx, "192.0.2.1"); !errors.Is(err, limittest.ErrDown) {
		t.Fatalf("Peek on a failing store: %v", err)
	}
	for range 5 {
		_ = l.Reset(ctx, "192.0.2.1")
	}
	if err := l.Reset(ctx, "192.0.2.1"); !errors.Is(err, limitstore.ErrCircuitOpen) {
		t.Fatalf("Reset behind the open breaker: %v", err)
	}
	bare := guarded(t, takeOnly{ref})
	if err := bare.Reset(ctx, [][]byte{[]byte("k")}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset through a guard on a Take-only store: %v", err)
	}
	if _, err := limittest.Take(ctx, bare, &limitstore.Op{Peek: true, N: 1, Cost: 1}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Peek through a guard on a Take-only store: %v", err)
	}
}

// takeOnly hides every method of its store but Take.
type takeOnly struct{ s limitstore.Store }

func (o takeOnly) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = o.take(ctx, op)
	return err
}

func (o takeOnly) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	return limittest.Take(ctx, o.s, op)
}

// A caller whose context is cancelled while the store is asked is released
// (at once when it leaves after the first 10 ms of the call, at 10 ms when
// it leaves sooner), admitted by no failure mode (a client cannot cancel
// its way past FailOpen), with an error wrapping context.Canceled; the
// call goes on without it and its charge counts: the next caller meets it.
// The breaker learns nothing from it. A caller cancelled before the call
// still gets the store's decision (a client that half-closed its
// connection).
func TestCancelledCallerIsReleased(t *testing.T) {
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailLocal, limit.FailClosed} {
		for _, tc := range []struct {
			name          string
			leave, wantAt time.Duration
		}{
			{"leaves_after_10ms", 30 * time.Millisecond, 30 * time.Millisecond},
			{"leaves_within_10ms", 2 * time.Millisecond, 10 * time.Millisecond},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					obs := &limittest.Recorder{}
					store := guarded(t, &lateReplyStore{Store: limittest.NewStore(nil), delay: 100 * time.Millisecond}, guard.WithTimeout(time.Second), guard.WithObserver(obs))
					var opts []limit.Option
					if mode == limit.FailLocal {
						opts = append(opts, limit.WithLocalStore(limittest.NewStore(nil)))
					}
					l := mustNew(t, store, limit.Policy{Limit: 1, FailureMode: mode}, opts...)
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(tc.leave, cancel)
					start := time.Now()
					d, err := l.Consume(ctx, "u")
					if el := time.Since(start); el != tc.wantAt {
						t.Errorf("Consume returned %v after the call began, want %v", el, tc.wantAt)
					}
					if d.Allowed || !errors.Is(err, context.Canceled) {
						t.Fatalf("cancelled caller: %+v, %v; want nothing admitted and context.Canceled", d, err)
					}
					time.Sleep(200 * time.Millisecond)
					if d, err := l.Consume(context.Background(), "u"); err != nil || d.Allowed {
						t.Fatalf("after the abandoned call: %+v, %v; want its charge to count (denied)", d, err)
					}
					gone, stop := context.WithCancel(context.Background())
					stop()
					l2 := mustNew(t, store, limit.Policy{Name: "fresh", Limit: 1, FailureMode: mode}, opts...)
					if d, err := l2.Consume(gone, "v"); err != nil || !d.Allowed {
						t.Fatalf("caller cancelled before the call: %+v, %v; want the store's own decision (admitted)", d, err)
					}
					if len(obs.Breaker()) != 0 {
						t.Fatalf("breaker transitions %v after a caller left: want none", obs.Breaker())
					}
				})
			})
		}
	}
}

// A caller with a deadline nearer than the timeout is released when it goes
// away too, before its deadline.
func TestCancelledCallerWithADeadlineIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := guarded(t, limittest.SlowStore{Store: limittest.NewStore(nil), Delay: 100 * time.Millisecond}, guard.WithTimeout(time.Second))
		l := mustNew(t, store, limit.Policy{Limit: 1, FailureMode: limit.FailOpen})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		time.AfterFunc(3*time.Millisecond, cancel)
		start := time.Now()
		d, err := l.Consume(ctx, "u")
		if el := time.Since(start); el != 3*time.Millisecond || d.Allowed || !errors.Is(err, context.Canceled) {
			t.Fatalf("after %v: %+v, %v; want released at 3 ms, nothing admitted, context.Canceled", el, d, err)
		}
	})
}

// lateReplyStore decides each call at once in Store and answers delay
// later, or at its context's end with the context's error: a network store
// whose command was sent and whose reply is slow (the charge is made
// whether or not the caller waits for it).
type lateReplyStore struct {
	limitstore.Store
	delay time.Duration
}

func (s *lateReplyStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *lateReplyStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	res, err := limittest.Take(ctx, s.Store, op)
	select {
	case <-time.After(s.delay):
		return res, err
	case <-ctx.Done():
		return limitstore.Result{}, ctx.Err()
	}
}

// A timeout New cannot honour is refused, naming the option: zero,
// negative, and past MaxTimeout (math.MaxInt64 used to overflow the
// call's deadline, which then fired at once and failed every decision).
func TestWithTimeoutRefusesWhatItCannotHonour(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, guard.MaxTimeout + time.Nanosecond, math.MaxInt64} {
		_, err := guard.New(limittest.NewStore(nil), guard.WithTimeout(d))
		if !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithTimeout") {
			t.Errorf("WithTimeout(%v): %v, want ErrInvalidOption naming WithTimeout", d, err)
		}
	}
	if _, err := guard.New(limittest.NewStore(nil), guard.WithTimeout(guard.MaxTimeout)); err != nil {
		t.Errorf("WithTimeout(MaxTimeout): %v", err)
	}
}
