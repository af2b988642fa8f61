package guard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

type traceKey struct{}

// The store's context carries the caller's values, never its cancellation
// (nor its cause), has a deadline at least the store timeout away, and is
// shared, Done channel and all, by calls that start in the same tick.
func TestStoreContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []context.Context
		var dones []<-chan struct{}
		inspect := &ctxStore{f: func(ctx context.Context) {
			seen = append(seen, ctx)
			dones = append(dones, ctx.Done())
			if ctx.Value(traceKey{}) != "trace-7" {
				t.Errorf("store context lost the caller's value: %v", ctx.Value(traceKey{}))
			}
			if err := ctx.Err(); err != nil {
				t.Errorf("store context already done: %v", err)
			}
			if c := context.Cause(ctx); c != nil {
				t.Errorf("context.Cause of a live store context: %v (the caller's cancellation leaked)", c)
			}
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < 100*time.Millisecond || time.Until(dl) > 101*time.Millisecond {
				t.Errorf("deadline %v away, want the 100 ms timeout rounded up to the 1 ms tick", time.Until(dl))
			}
		}}
		l := mustNew(t, guarded(t, inspect), limit.Policy{Limit: 100})
		parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), traceKey{}, "trace-7"))
		cancel(errors.New("client went away"))
		for range 3 {
			if _, err := l.Consume(parent, "u"); err != nil {
				t.Fatal(err)
			}
		}
		if dones[0] != dones[1] || dones[1] != dones[2] {
			t.Fatal("calls in one tick got different Done channels: want one shared deadline")
		}
		time.Sleep(time.Millisecond)
		if _, err := l.Consume(parent, "u"); err != nil {
			t.Fatal(err)
		}
		if dones[3] == dones[0] {
			t.Fatal("a call one tick later shares the previous tick's deadline")
		}
		// Held after Take returned (which a Store must not do): the pooled
		// context was cleared, so keep the tick's channel and check it closes
		// at the deadline with the deadline's error.
		done := dones[0]
		time.Sleep(200 * time.Millisecond)
		select {
		case <-done:
		default:
			t.Fatal("the tick's Done channel is still open after twice the timeout")
		}
	})
}

// ctxStore calls f with each call's context, then admits.
type ctxStore struct {
	f func(context.Context)
}

func (s *ctxStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *ctxStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.f(ctx)
	return limitstore.Result{Allowed: true, N: op.N}, nil
}

// A call fails at the store timeout when the store answered nothing while it
// waited; while the store answers other calls, a late answer is waited for up
// to twice the timeout (queueing in the client must not turn an answer into
// a failure, and FailOpen must not then admit what the store denied).
func TestStoreTimeoutMeasuresTheStoreNotTheCall(t *testing.T) {
	const timeout = 100 * time.Millisecond
	cases := []struct {
		name       string
		slow       time.Duration // delay of the call under test; -1: never answers
		others     bool          // other calls answer every 10 ms meanwhile
		wantErr    bool
		wantWaited time.Duration
	}{
		{"late_answer_while_the_store_answers_others", 150 * time.Millisecond, true, false, 150 * time.Millisecond},
		{"answer_beyond_twice_the_timeout", 250 * time.Millisecond, true, true, 2*timeout + time.Millisecond},
		{"silent_store", -1, false, true, timeout + time.Millisecond + guard.SilenceGrace},
		{"slow_store_answering_nothing_else", 150 * time.Millisecond, false, true, timeout + time.Millisecond + guard.SilenceGrace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &scriptedStore{Store: ioStore(nil), delay: func(op *limitstore.Op) time.Duration {
					if string(op.Quotas[0].Key[len(op.Quotas[0].Key)-4:]) == "slow" {
						return tc.slow
					}
					return time.Millisecond
				}}
				l := mustNew(t, guarded(t, s, guard.WithTimeout(timeout)), limit.Policy{Limit: 1000, FailureMode: limit.FailClosed})
				stop := make(chan struct{})
				var wg sync.WaitGroup
				if tc.others {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							case <-time.After(10 * time.Millisecond):
								if _, err := l.Consume(context.Background(), "fast"); err != nil {
									t.Errorf("fast call: %v", err)
								}
							}
						}
					})
				}
				start := time.Now()
				d, err := l.Consume(context.Background(), "slow")
				waited := time.Since(start)
				close(stop)
				wg.Wait()
				if (err != nil) != tc.wantErr || waited != tc.wantWaited {
					t.Fatalf("waited %v, error %v; want %v, error %v", waited, err, tc.wantWaited, tc.wantErr)
				}
				if tc.wantErr && (!errors.Is(err, context.DeadlineExceeded) || d.Allowed) {
					t.Fatalf("%+v %v: want FailClosed's 503 on the timeout", d, err)
				}
			})
		})
	}
}

// A store that stops answering is cut off at the store timeout (default
// 100 ms), rounded up to the 1 ms tick of the shared deadlines, plus the
// grace that confirms the silence, measured on synctest's fake clock, and
// the failure mode applies.
func TestHangingStoreTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []guard.Option
		want time.Duration
	}{
		{"default_100ms", nil, 100 * time.Millisecond},
		{"configured_30ms", []guard.Option{guard.WithTimeout(30 * time.Millisecond)}, 30 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var seen error
				l := mustNew(t, guarded(t, limittest.SlowStore{}, tc.opts...), limit.Policy{FailureMode: limit.FailClosed, OnStoreError: func(_ context.Context, _ limit.Request, err error) { seen = err }})
				start := time.Now()
				resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
				if took, want := time.Since(start), tc.want+time.Millisecond+guard.SilenceGrace; took != want {
					t.Fatalf("Check took %v, want the store timeout %v + the 1 ms tick + %v", took, tc.want, guard.SilenceGrace)
				}
				if resp.Status != 503 || !errors.Is(seen, context.DeadlineExceeded) {
					t.Fatalf("status %d, error %v", resp.Status, seen)
				}
			})
		})
	}
}

// A client that cancels its own request (half-closes the connection) gets the
// same decision as any other: its cancellation is not a store failure, so it
// cannot make a FailOpen policy admit it over an exhausted limit.
func TestClientCancellationIsNotAStoreFailure(t *testing.T) {
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailLocal, limit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			// A store that does I/O and fails with its context's error once
			// the context is done, as a real network store does.
			store := guarded(t, limittest.SlowStore{Store: limittest.NewStore(nil), Delay: time.Nanosecond})
			var opts []limit.Option
			if mode == limit.FailLocal {
				opts = append(opts, limit.WithLocalStore(limittest.NewStore(nil)))
			}
			l := limittest.MustNew(store, limit.Policy{Limit: 1, FailureMode: mode}, opts...)
			if r := check(l, context.Background(), limit.Request{Peer: "192.0.2.1:1"}); r.Status != 0 {
				t.Fatal("first request denied")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for i := 0; i < 5; i++ {
				r := check(l, ctx, limit.Request{Peer: "192.0.2.1:1"})
				if r.Status != 429 || r.Decision.StoreFailed {
					t.Fatalf("cancelled request %d: status %d, store failed %v; want a normal 429", i, r.Status, r.Decision.StoreFailed)
				}
			}
		})
	}
}

// A caller's deadline that comes before the timeout ends the call there
// (a slow store answering after 40 ms, a 100 ms timeout, a Consume whose
// context ends after 5 ms returns after 5 ms, not 40), the FailureMode
// decides, and the breaker learns nothing about the store from it: a
// caller with a tight budget cannot open the breaker for everyone. A
// context already past its deadline fails at once, without a call.
func TestCallerDeadlineBoundsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := &scriptedStore{Store: ioStore(nil), delay: func(*limitstore.Op) time.Duration { return 40 * time.Millisecond }}
		obs := &limittest.Recorder{}
		l := mustNew(t, guarded(t, slow, guard.WithObserver(obs)), limit.Policy{Limit: 100, FailureMode: limit.FailClosed})
		for i := range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			start := time.Now()
			d, err := l.Consume(ctx, "u")
			cancel()
			if took := time.Since(start); took != 5*time.Millisecond || d.Allowed || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: %v, %+v, %v; want the caller's 5 ms, FailClosed, DeadlineExceeded", i, took, d, err)
			}
		}
		if len(obs.Breaker()) != 0 {
			t.Fatalf("breaker transitions %v after callers' deadlines: want none", obs.Breaker())
		}
		start := time.Now()
		if d, err := l.Consume(context.Background(), "u"); err != nil || !d.Allowed || time.Since(start) != 40*time.Millisecond {
			t.Fatalf("a caller without a deadline: %+v, %v after %v; want the store's answer after 40 ms", d, err, time.Since(start))
		}
		calls := slow.calls.Load()
		past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := l.Consume(past, "u"); !errors.Is(err, context.DeadlineExceeded) || slow.calls.Load() != calls {
			t.Fatalf("a context past its deadline: %v, %d calls; want DeadlineExceeded without a call", err, slow.calls.Load()-calls)
		}
	})
}
