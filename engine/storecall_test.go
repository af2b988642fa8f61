package limit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The three failure modes against a store that fails, hangs or panics.
func TestFailureModes(t *testing.T) {
	stores := map[string]func() limitstore.Store{
		"error": func() limitstore.Store { return errStore },
		"panic": func() limitstore.Store { return panickingStore },
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			t.Run("open", func(t *testing.T) {
				obs := &limittest.Recorder{}
				l := mustNew(t, mk(), limit.Policy{Limit: 1, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}, limit.WithObserver(obs))
				for i := 0; i < 3; i++ { // far beyond the limit: nothing is counted
					resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
					d := resp.Decision
					if resp.Denied() || !d.Allowed || d.Outcome != limit.OutcomeDegraded || !d.StoreFailed || len(resp.Fields()) != 0 {
						t.Fatalf("FailOpen: %+v, fields %v; want admitted, degraded, no RateLimit numbers", d, resp.Fields())
					}
				}
				if ev := obs.Decisions(); len(ev) != 3 || ev[2].Outcome != limit.OutcomeDegraded || obs.StoreErrors() != 3 {
					t.Fatalf("events %+v, store errors %d", ev, obs.StoreErrors())
				}
			})
			t.Run("closed", func(t *testing.T) {
				for _, lv := range []limit.Disclosure{limit.DiscloseNone, limit.DiscloseRetryAfter, limit.DiscloseOnLimit, limit.DiscloseAlways} {
					obs := &limittest.Recorder{}
					l := mustNew(t, mk(), limit.Policy{FailureMode: limit.FailClosed, Disclosure: lv}, limit.WithObserver(obs))
					resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
					h := resp.Header
					if resp.Status != 503 || resp.Decision.Outcome != limit.OutcomeLimited || h.Get("Cache-Control") != "no-store" {
						t.Fatalf("%v: %d %+v", lv, resp.Status, resp.Decision)
					}
					if h.Get("Ratelimit") != "" || h.Get("Ratelimit-Policy") != "" {
						t.Fatalf("%v: RateLimit numbers on a 503 that no store decided: %v", lv, h)
					}
					wantRetry, wantBody := "1", body503
					if lv == limit.DiscloseNone {
						wantRetry, wantBody = "", ""
					}
					if h.Get("Retry-After") != wantRetry || string(resp.Body) != wantBody {
						t.Fatalf("%v: Retry-After %q body %q, want %q %q", lv, h.Get("Retry-After"), resp.Body, wantRetry, wantBody)
					}
					if ev := obs.Decisions(); len(ev) != 1 || ev[0].Outcome != limit.OutcomeLimited {
						t.Fatalf("%v: events %+v", lv, ev)
					}
				}
			})
			t.Run("local", func(t *testing.T) {
				local := storeAt(epochMS)
				l := mustNew(t, mk(), limit.Policy{Limit: 2, Window: time.Minute, AlignWindows: true, Algorithm: limit.FixedWindow, FailureMode: limit.FailLocal, Disclosure: limit.DiscloseAlways},
					limit.WithLocalStore(local))
				var outcomes []limit.Outcome
				var last response
				for i := 0; i < 3; i++ {
					last = check(l, context.Background(), req("192.0.2.1:1", "/"))
					outcomes = append(outcomes, last.Decision.Outcome)
					if !last.Decision.StoreFailed {
						t.Fatal("StoreFailed is false under FailLocal")
					}
				}
				if outcomes[0] != limit.OutcomeDegraded || outcomes[1] != limit.OutcomeDegraded || outcomes[2] != limit.OutcomeLimited || last.Status != 429 {
					t.Fatalf("outcomes %v, last status %d; want the same policy enforced locally", outcomes, last.Status)
				}
				// The local store's numbers are real: they are disclosed.
				if got := last.Header.Get("Ratelimit"); got != `"2p60f";r=0;t=50` {
					t.Fatalf("RateLimit %q from the local store", got)
				}
			})
		})
	}
	if _, err := limit.New(errStore, limit.Policy{FailureMode: limit.FailLocal}); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("FailLocal without a local store: %v", err)
	}
}

// Under FailLocal, a failing local store fails open, and the error says both.
func TestFailLocalWithFailingLocalStoreFailsOpen(t *testing.T) {
	l := mustNew(t, errStore, limit.Policy{FailureMode: limit.FailLocal}, limit.WithLocalStore(panickingStore))
	d, err := l.Consume(context.Background(), "u")
	if !d.Allowed || d.Outcome != limit.OutcomeDegraded || !errors.Is(err, errBackend) || !strings.Contains(err.Error(), "limit: store panicked: ") {
		t.Fatalf("%+v, %v", d, err)
	}
}

// Isolated store failures (the store answers other calls, its breaker stays
// closed) are counted every time and logged at most once per 10 s.
func TestStoreFailuresLoggedOncePerTenSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &limittest.Recorder{}
		var logs limittest.Log
		flaky := &limittest.FlakyStore{Store: limittest.NewStore(nil)}
		l := mustNew(t, flaky, limit.Policy{Limit: 1000}, limit.WithObserver(obs), limit.WithLogger(logs.Logger()))
		// failures in a row stay below the breaker's 5, a success between
		isolated := func(n int) {
			for i := 0; i < n; i++ {
				flaky.Fail()
				check(l, context.Background(), req("192.0.2.1:1", "/"))
				flaky.Heal()
				check(l, context.Background(), req("192.0.2.1:1", "/"))
			}
		}
		isolated(50)
		const line = "store call failed"
		if obs.StoreErrors() != 50 || logs.Count(line) != 1 || len(obs.Breaker()) != 0 {
			t.Fatalf("counted %d, logged %d, breaker %v; want 50, 1 and no transition", obs.StoreErrors(), logs.Count(line), obs.Breaker())
		}
		time.Sleep(9 * time.Second)
		isolated(1)
		if logs.Count(line) != 1 {
			t.Fatal("logged again within 10 s")
		}
		time.Sleep(time.Second)
		isolated(1)
		if logs.Count(line) != 2 {
			t.Fatalf("logged %d times after 10 s, want 2", logs.Count(line))
		}
	})
}

func TestStoreFailureModes(t *testing.T) {
	down := limittest.FailingStore{Err: errors.New("connection refused")}
	local := storeAt(0)
	tests := []struct {
		name    string
		store   limitstore.Store
		mode    limit.FailureMode
		allowed bool
		outcome limit.Outcome
		status  int
	}{
		{"fail_open", down, limit.FailOpen, true, limit.OutcomeDegraded, 0},
		{"fail_closed", down, limit.FailClosed, false, limit.OutcomeLimited, 503},
		{"fail_local", down, limit.FailLocal, true, limit.OutcomeDegraded, 0},
		{"panicking_store_is_a_failure", panickingStore, limit.FailOpen, true, limit.OutcomeDegraded, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []limit.Option
			if tt.mode == limit.FailLocal {
				opts = append(opts, limit.WithLocalStore(local))
			}
			l := limittest.MustNew(tt.store, limit.Policy{FailureMode: tt.mode, Disclosure: limit.DiscloseAlways}, opts...)
			r := check(l, context.Background(), limit.Request{Peer: "192.0.2.1:1"})
			if r.Decision.Allowed != tt.allowed || r.Decision.Outcome != tt.outcome || r.Status != tt.status {
				t.Fatalf("allowed=%v outcome=%s status=%d", r.Decision.Allowed, r.Decision.Outcome, r.Status)
			}
			if tt.mode == limit.FailOpen {
				for _, f := range r.Fields() {
					if strings.HasPrefix(f.Name, "Ratelimit") {
						t.Fatalf("fail-open response claims numbers it does not know: %v", r.Fields())
					}
				}
			}
		})
	}
}

// A store called without the guard that fails with the caller's
// cancellation gives a decision that admits nothing, FailOpen or not.
func TestCancelledCallerOfUnguardedStoreIsNotAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limittest.MustNew(limittest.SlowStore{Store: limittest.NewStore(nil), Delay: time.Second}, limit.Policy{Limit: 5, FailureMode: limit.FailOpen})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Millisecond, cancel)
		if d, err := l.Consume(ctx, "u"); d.Allowed || !errors.Is(err, context.Canceled) {
			t.Fatalf("%+v, %v; want nothing admitted and context.Canceled", d, err)
		}
	})
}

// A caller whose deadline has passed, or passes while the store is asked,
// is admitted by no FailureMode: a client cannot get past a spent limit
// by sending a deadline too short for the store (a gRPC client sets it).
// The store's own timeout, under a caller that waits on, is a store
// failure: FailOpen admits.
func TestCallerDeadlineNeverAdmitsPastTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow, err := guard.New(limittest.SlowStore{Store: limittest.NewStore(nil), Delay: 40 * time.Millisecond},
			guard.WithTimeout(20*time.Millisecond), guard.WithoutDenyCache())
		if err != nil {
			t.Fatal(err)
		}
		l := limittest.MustNew(slow, limit.Policy{Limit: 1, FailureMode: limit.FailOpen})
		for name, dl := range map[string]time.Duration{"passed": -time.Second, "now": 0, "shorter than the store": 5 * time.Millisecond} {
			ctx, cancel := context.WithTimeout(context.Background(), dl)
			d, err := l.Consume(ctx, "k")
			cancel()
			if d.Allowed || d.Outcome != limit.OutcomeLimited || err == nil {
				t.Errorf("deadline %s: %+v, %v; want limited with the error", name, d.Outcome, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if d, err := l.Consume(ctx, "k"); !d.Allowed || d.Outcome != limit.OutcomeDegraded || err == nil {
			t.Errorf("the store's own timeout: %+v, %v; want FailOpen's degraded admission", d.Outcome, err)
		}
	})
}

// durationObserver records the durations of the store calls it is told of.
type durationObserver struct {
	limittest.Recorder
	mu sync.Mutex
	ds []time.Duration
}

func (o *durationObserver) StoreDuration(_, _ string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ds = append(o.ds, d)
}

// A timed store call reports how long the store took to answer, whatever
// the Limiter's age: exactly, on a synctest bubble's clock.
func TestStoreDurationIsTheCallsLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &durationObserver{}
		store := &lagStore{next: limittest.NewStore(time.Now), lag: 30 * time.Millisecond}
		l := mustNew(t, store, limit.Policy{Limit: 10}, limit.WithObserver(obs))
		time.Sleep(time.Hour)
		check(l, context.Background(), req("192.0.2.1:1", "/"))
		store.lag = 7 * time.Millisecond
		check(l, context.Background(), req("192.0.2.1:1", "/"))
		if want := []time.Duration{30 * time.Millisecond, 7 * time.Millisecond}; !slices.Equal(obs.ds, want) {
			t.Fatalf("store durations %v, want %v", obs.ds, want)
		}
	})
}

// While a store's circuit breaker is open, a caller whose context is done
// gets the FailureMode's decision, as one that stays, whether the breaker
// opened on timeouts or on errors: the store was not called, and the
// caller's context had no part in it.
func TestAnOpenBreakerDecidesAnEndedCallerByTheFailureMode(t *testing.T) {
	for name, fail := range map[string]func(*limittest.FlakyStore){
		"opened on timeouts": (*limittest.FlakyStore).Hang,
		"opened on errors":   (*limittest.FlakyStore).Fail,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				flaky := &limittest.FlakyStore{Store: limittest.NewStore(nil)}
				g, err := guard.New(flaky)
				if err != nil {
					t.Fatal(err)
				}
				l := mustNew(t, g, limit.Policy{Limit: 100})
				fail(flaky)
				for range 6 { // the breaker opens
					l.Consume(context.Background(), "a")
				}
				ended, cancel := context.WithCancel(context.Background())
				cancel()
				d, err := l.Consume(ended, "b")
				if !errors.Is(err, limitstore.ErrCircuitOpen) {
					t.Fatalf("a call behind the open breaker: %v, want ErrCircuitOpen", err)
				}
				if !d.Allowed || d.Outcome != limit.OutcomeDegraded {
					t.Fatalf("an ended caller behind the open breaker: %s, want FailOpen's degraded admission", d.Outcome)
				}
			})
		})
	}
}
