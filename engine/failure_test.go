package limit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The three failure modes against a store that fails, hangs or panics.
func TestFailureModes(t *testing.T) {
	stores := map[string]func() Store{
		"error": func() Store { return errStore },
		"panic": func() Store { return panickingStore{} },
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			t.Run("open", func(t *testing.T) {
				obs := &tally{}
				l := mustNew(t, mk(), Policy{Limit: 1, Disclosure: DiscloseAlways, HeaderStyle: HeadersIETF | HeadersTriplet | HeadersLegacy}, WithObserver(obs))
				for i := 0; i < 3; i++ { // far beyond the limit: nothing is counted
					resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
					d := resp.Decision
					if resp.Denied() || !d.Allowed || d.Outcome != OutcomeDegraded || !d.StoreFailed || len(resp.Fields()) != 0 {
						t.Fatalf("FailOpen: %+v, fields %v; want admitted, degraded, no RateLimit numbers", d, resp.Fields())
					}
				}
				if ev := obs.events(); len(ev) != 3 || ev[2].Outcome != OutcomeDegraded || obs.storeErrs != 3 {
					t.Fatalf("events %+v, store errors %d", ev, obs.storeErrs)
				}
			})
			t.Run("closed", func(t *testing.T) {
				for _, lv := range []Disclosure{DiscloseNone, DiscloseRetryAfter, DiscloseOnLimit, DiscloseAlways} {
					obs := &tally{}
					l := mustNew(t, mk(), Policy{FailureMode: FailClosed, Disclosure: lv}, WithObserver(obs))
					resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
					h := responseHeader(resp)
					if resp.Status != 503 || resp.Decision.Outcome != OutcomeLimited || h.Get("Cache-Control") != "no-store" {
						t.Fatalf("%v: %d %+v", lv, resp.Status, resp.Decision)
					}
					if h.Get("Ratelimit") != "" || h.Get("Ratelimit-Policy") != "" {
						t.Fatalf("%v: RateLimit numbers on a 503 that no store decided: %v", lv, h)
					}
					wantRetry, wantBody := "1", string(body503)
					if lv == DiscloseNone {
						wantRetry, wantBody = "", ""
					}
					if h.Get("Retry-After") != wantRetry || string(resp.Body) != wantBody {
						t.Fatalf("%v: Retry-After %q body %q, want %q %q", lv, h.Get("Retry-After"), resp.Body, wantRetry, wantBody)
					}
					if ev := obs.events(); len(ev) != 1 || ev[0].Outcome != OutcomeLimited {
						t.Fatalf("%v: events %+v", lv, ev)
					}
				}
			})
			t.Run("local", func(t *testing.T) {
				local := newMapStore(epochMS)
				l := mustNew(t, mk(), Policy{Limit: 2, Window: time.Minute, AlignWindows: true, Algorithm: FixedWindow, FailureMode: FailLocal, Disclosure: DiscloseAlways},
					WithLocalStore(local))
				var outcomes []Outcome
				var last Response
				for i := 0; i < 3; i++ {
					last = l.Check(context.Background(), req("192.0.2.1:1", "/"))
					outcomes = append(outcomes, last.Decision.Outcome)
					if !last.Decision.StoreFailed {
						t.Fatal("StoreFailed is false under FailLocal")
					}
				}
				if outcomes[0] != OutcomeDegraded || outcomes[1] != OutcomeDegraded || outcomes[2] != OutcomeLimited || last.Status != 429 {
					t.Fatalf("outcomes %v, last status %d; want the same policy enforced locally", outcomes, last.Status)
				}
				// The local store's numbers are real: they are disclosed.
				if got := responseHeader(last).Get("Ratelimit"); got != `"2p60f";r=0;t=50` {
					t.Fatalf("RateLimit %q from the local store", got)
				}
			})
		})
	}
	if _, err := New(errStore, Policy{FailureMode: FailLocal}); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("FailLocal without a local store: %v", err)
	}
}

// Under FailLocal, a failing local store fails open, and the error says both.
func TestFailLocalWithFailingLocalStoreFailsOpen(t *testing.T) {
	l := mustNew(t, errStore, Policy{FailureMode: FailLocal}, WithLocalStore(panickingStore{}))
	d, err := l.Consume(context.Background(), "u")
	if !d.Allowed || d.Outcome != OutcomeDegraded || !errors.Is(err, errBackend) || !errors.Is(err, ErrStorePanic) {
		t.Fatalf("%+v, %v", d, err)
	}
}

// A store that stops answering is cut off at the store timeout (default
// 100 ms), measured on synctest's fake clock, and the failure mode applies.
func TestHangingStoreTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"default_100ms", nil, 100 * time.Millisecond},
		{"configured_30ms", []Option{WithStoreTimeout(30 * time.Millisecond)}, 30 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var seen error
				l := mustNew(t, hangStore{}, Policy{FailureMode: FailClosed, OnStoreError: func(_ context.Context, _ Request, err error) { seen = err }}, tc.opts...)
				start := time.Now()
				resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
				if took := time.Since(start); took != tc.want {
					t.Fatalf("Check took %v, want exactly the store timeout %v", took, tc.want)
				}
				if resp.Status != 503 || !errors.Is(seen, context.DeadlineExceeded) {
					t.Fatalf("status %d, error %v", resp.Status, seen)
				}
			})
		})
	}
	if DefaultStoreTimeout != 100*time.Millisecond {
		t.Fatalf("DefaultStoreTimeout %v, the contract says 100 ms", DefaultStoreTimeout)
	}
}

// In-process stores are called without a deadline (no timer per decision).
func TestInProcessStoreHasNoDeadline(t *testing.T) {
	s := &deadlineStore{}
	l := mustNew(t, s, Policy{})
	l.Check(context.Background(), req("192.0.2.1:1", "/"))
	if s.had {
		t.Fatal("an InProcessStore got a context with a deadline")
	}
}

type deadlineStore struct{ had bool }

func (s *deadlineStore) Take(ctx context.Context, op *Op) (Result, error) {
	_, s.had = ctx.Deadline()
	var sts [MaxQuotas]State
	return op.Apply(&sts, epochMS), nil
}

func (s *deadlineStore) InProcess() {}

// Store failures are counted every time and logged at most once per 10 s.
func TestStoreFailuresLoggedOncePerTenSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &tally{}
		var logs logBuffer
		l := mustNew(t, errStore, Policy{}, WithObserver(obs), WithLogger(logs.logger()))
		for i := 0; i < 50; i++ {
			l.Check(context.Background(), req("192.0.2.1:1", "/"))
		}
		const line = "store call failed"
		if obs.storeErrs != 50 || logs.count(line) != 1 {
			t.Fatalf("counted %d, logged %d; want 50 and 1", obs.storeErrs, logs.count(line))
		}
		time.Sleep(9 * time.Second)
		l.Check(context.Background(), req("192.0.2.1:1", "/"))
		if logs.count(line) != 1 {
			t.Fatal("logged again within 10 s")
		}
		time.Sleep(time.Second)
		l.Check(context.Background(), req("192.0.2.1:1", "/"))
		if logs.count(line) != 2 {
			t.Fatalf("logged %d times after 10 s, want 2", logs.count(line))
		}
	})
}

// ctxStore fails with the context's error when the context is done, as a real
// network store does.
type ctxStore struct{ inner Store }

func (s ctxStore) Take(ctx context.Context, op *Op) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return s.inner.Take(ctx, op)
}

// A client that cancels its own request (half-closes the connection) gets the
// same decision as any other: its cancellation is not a store failure, so it
// cannot make a FailOpen policy admit it over an exhausted limit.
func TestClientCancellationIsNotAStoreFailure(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailLocal, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			store := ctxStore{newMapStore(0)}
			l := MustNew(store, Policy{Limit: 1, FailureMode: mode}, WithLocalStore(newMapStore(0)))
			if r := l.Check(context.Background(), Request{Peer: "192.0.2.1:1"}); r.Denied() {
				t.Fatal("first request denied")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for i := 0; i < 5; i++ {
				r := l.Check(ctx, Request{Peer: "192.0.2.1:1"})
				if r.Status != 429 || r.Decision.StoreFailed {
					t.Fatalf("cancelled request %d: status %d, store failed %v; want a normal 429", i, r.Status, r.Decision.StoreFailed)
				}
			}
		})
	}
}
