package guard_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The breaker: a store silent for one timeout opens it at once; then no
// decision waits (the FailureMode decides, with ErrCircuitOpen); one probe
// per cool-down; a success closes it. Each transition is reported and
// logged once.
func TestCircuitBreakerSilentStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flaky := &limittest.FlakyStore{Store: ioStore(nil)}
		obs := &limittest.Recorder{}
		var logs limittest.Log
		l := mustNew(t, guarded(t, flaky, guard.WithObserver(obs), guard.WithLogger(logs.Logger())), limit.Policy{Limit: 1_000_000}, limit.WithObserver(obs))
		ctx := context.Background()
		if _, err := l.Consume(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		flaky.Hang()
		start := time.Now()
		d, err := l.Consume(ctx, "u")
		if el := time.Since(start); el != guard.DefaultTimeout+time.Millisecond+guard.SilenceGrace || !d.Allowed || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first call to a silent store: %v, %+v, %v; want the timeout (+ tick + grace), FailOpen", el, d, err)
		}
		if got := obs.Breaker(); len(got) != 1 || !got[0] || logs.Count("circuit breaker open") != 1 {
			t.Fatalf("transitions %v, %d open lines; want one open, logged once", got, logs.Count("circuit breaker open"))
		}
		calls := flaky.Calls()
		for i := range 100 {
			start := time.Now()
			d, err := l.Consume(ctx, "u"+strconv.Itoa(i))
			if time.Since(start) != 0 || !d.Allowed || !d.StoreFailed || !errors.Is(err, limitstore.ErrCircuitOpen) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("decision %d with the breaker open: %v, %+v, %v; want at once, FailOpen, ErrCircuitOpen wrapping the cause", i, time.Since(start), d, err)
			}
		}
		if flaky.Calls() != calls || obs.Skipped("breaker-open") != 100 || obs.StoreErrors() != 101 {
			t.Fatalf("store called %d times, %d skipped, %d store errors; want 0, 100, 101", flaky.Calls()-calls, obs.Skipped("breaker-open"), obs.StoreErrors())
		}
		// After the cool-down one decision probes (and waits), the others
		// meanwhile decide at once.
		time.Sleep(250 * time.Millisecond)
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := l.Consume(ctx, "probe"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, limitstore.ErrCircuitOpen) {
				t.Errorf("probe: %v, want the store's timeout", err)
			}
		})
		synctest.Wait()
		for range 10 {
			if _, err := l.Consume(ctx, "during-probe"); !errors.Is(err, limitstore.ErrCircuitOpen) {
				t.Fatalf("during the probe: %v, want ErrCircuitOpen", err)
			}
		}
		wg.Wait()
		if flaky.Calls() != calls+1 {
			t.Fatalf("%d calls during the probe, want 1", flaky.Calls()-calls)
		}
		if got := obs.Breaker(); len(got) != 1 || logs.Count("circuit breaker") != 1 {
			t.Fatalf("a failed probe reported %v, %d breaker lines; want no new transition", got, logs.Count("circuit breaker"))
		}
		flaky.Heal()
		time.Sleep(250 * time.Millisecond)
		if _, err := l.Consume(ctx, "back"); err != nil {
			t.Fatalf("probe after healing: %v", err)
		}
		if got := obs.Breaker(); len(got) != 2 || got[1] || logs.Count("circuit breaker closed") != 1 {
			t.Fatalf("transitions %v, %d closed lines; want open then closed, each logged once", got, logs.Count("circuit breaker closed"))
		}
		for range 5 {
			if _, err := l.Consume(ctx, "back"); err != nil {
				t.Fatal(err)
			}
		}
		if flaky.Calls() != calls+2+5 {
			t.Fatalf("after recovery %d calls, want every decision to call the store", flaky.Calls()-calls-2)
		}
	})
}

// Fast failures open the breaker after 5 in a row (a success in between
// starts the count again), and the FailureMode then decides without a call.
func TestCircuitBreakerConsecutiveErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flaky := &limittest.FlakyStore{Store: ioStore(nil)}
		obs := &limittest.Recorder{}
		l := mustNew(t, guarded(t, flaky, guard.WithObserver(obs)), limit.Policy{Limit: 1_000_000, FailureMode: limit.FailClosed})
		ctx := context.Background()
		for range 3 {
			for range 4 {
				flaky.Fail()
				l.Consume(ctx, "u")
			}
			flaky.Heal()
			if _, err := l.Consume(ctx, "u"); err != nil {
				t.Fatal(err)
			}
		}
		if len(obs.Breaker()) != 0 {
			t.Fatalf("opened after runs of 4 failures: %v", obs.Breaker())
		}
		flaky.Fail()
		for range 5 {
			l.Consume(ctx, "u")
		}
		calls := flaky.Calls()
		d, err := l.Consume(ctx, "u")
		if len(obs.Breaker()) != 1 || flaky.Calls() != calls || d.Allowed || !errors.Is(err, limitstore.ErrCircuitOpen) || !errors.Is(err, limittest.ErrDown) {
			t.Fatalf("after 5 failures in a row: transitions %v, store called %d more, %+v, %v", obs.Breaker(), flaky.Calls()-calls, d, err)
		}
	})
}

// Limiters built separately on one wrapper share its breaker (and limiters
// from one New share it through With); limiters on another wrapper do not,
// even of the same backend.
func TestCircuitBreakerSharedPerWrapper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flaky := &limittest.FlakyStore{Store: ioStore(nil)}
		g := guarded(t, flaky)
		a := mustNew(t, g, limit.Policy{Limit: 100})
		b := mustNew(t, g, limit.Policy{Name: "b", Limit: 100})
		c, err := a.With(limit.Policy{Name: "c", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		elsewhere := mustNew(t, guarded(t, flaky), limit.Policy{Limit: 100})
		ctx := context.Background()
		flaky.Fail()
		for range 5 {
			a.Consume(ctx, "u")
		}
		for name, l := range map[string]*limit.Limiter{"separately built": b, "With": c} {
			if _, err := l.Consume(ctx, "u"); !errors.Is(err, limitstore.ErrCircuitOpen) {
				t.Errorf("%s limiter on the same store: %v, want ErrCircuitOpen", name, err)
			}
		}
		if _, err := elsewhere.Consume(ctx, "u"); errors.Is(err, limitstore.ErrCircuitOpen) || !errors.Is(err, limittest.ErrDown) {
			t.Errorf("limiter on another wrapper: %v, want the store's own failure (its breaker closed)", err)
		}
	})
}

// A store that hangs under steady load costs one timeout, not one per
// request: after the first timeout every decision answers at once, none
// waits more than the timeout (plus the tick and the silence grace: within
// the timeout + 10 ms), probes included, and limiting resumes at the first
// probe after the store returns.
func TestFrozenStoreCostsOneTimeoutNotOnePerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flaky := &limittest.FlakyStore{Store: ioStore(nil)}
		l := mustNew(t, guarded(t, flaky, guard.WithoutDenyCache()), limit.Policy{Limit: 1_000_000})
		ctx := context.Background()
		type result struct {
			start, took time.Duration
			failed      bool
		}
		var mu sync.Mutex
		var results []result
		t0 := time.Now()
		var wg sync.WaitGroup
		request := func() {
			start := time.Now()
			_, err := l.Consume(ctx, "client")
			mu.Lock()
			results = append(results, result{start.Sub(t0), time.Since(start), err != nil})
			mu.Unlock()
		}
		// 200 requests/s for 7 s; the store hangs from 1 s to 6 s.
		for i := range 1400 {
			if i == 200 {
				flaky.Hang()
			}
			if i == 1200 {
				flaky.Heal()
			}
			wg.Go(request)
			time.Sleep(5 * time.Millisecond)
		}
		wg.Wait()
		var firstTimeout time.Duration = -1
		var slowAfter, maxTook time.Duration
		var slowCount int
		resumed := time.Duration(-1)
		for _, r := range results {
			if r.failed && firstTimeout < 0 && r.took > 0 {
				firstTimeout = r.start + r.took
			}
			maxTook = max(maxTook, r.took)
			if firstTimeout >= 0 && r.start > firstTimeout && r.took > 0 && r.start < 6*time.Second {
				slowAfter = max(slowAfter, r.took)
				slowCount++
			}
			if r.start >= 6*time.Second && !r.failed && resumed < 0 {
				resumed = r.start - 6*time.Second
			}
		}
		t.Logf("first timeout at %v; after it %d of ~%d decisions waited (probes), longest %v; longest overall %v; limiting resumed %v after the store returned",
			firstTimeout, slowCount, int((6*time.Second-firstTimeout)/(5*time.Millisecond)), slowAfter, maxTook, resumed)
		if maxTook > guard.DefaultTimeout+10*time.Millisecond {
			t.Errorf("a decision took %v, want at most the store timeout + 10 ms", maxTook)
		}
		if slowCount > 5*4+1 { // one probe per 250 ms cool-down (plus its timeout) over 5 s
			t.Errorf("%d decisions waited after the first timeout, want only the probes (at most %d)", slowCount, 21)
		}
		if resumed < 0 || resumed > breakerResume {
			t.Errorf("limiting resumed %v after the store returned, want within %v", resumed, breakerResume)
		}
	})
}

// breakerResume bounds how long after a store's return the breaker lets
// decisions through again: one cool-down plus one probe's timeout.
// (The scenario's requests come every 5 ms: the first after the probe may
// start up to 5 ms later.)
const breakerResume = 250*time.Millisecond + guard.DefaultTimeout + time.Millisecond + guard.SilenceGrace + 5*time.Millisecond

// A caller whose own deadline comes before the timeout (a stale context, a
// tight budget) is never made the probe: were it, its deadline would end
// the probe and start another cool-down, and a few such callers would keep
// the breaker open over a healthy store. Here four of them loop while a
// caller without a deadline comes every 10 ms on a store that answers in
// 20 ms: the first one after the cool-down is the probe, and the store
// decides from then on.
func TestShortDeadlineCallersNeverHoldTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A healthy store answers after 20 ms: a caller with 2 ms cannot
		// wait for it.
		slow := &scriptedStore{Store: ioStore(nil), delay: func(*limitstore.Op) time.Duration { return 20 * time.Millisecond }}
		flaky := &limittest.FlakyStore{Store: slow}
		obs := &limittest.Recorder{}
		l := mustNew(t, guarded(t, flaky, guard.WithObserver(obs), guard.WithoutDenyCache()), limit.Policy{Limit: 1_000_000, FailureMode: limit.FailClosed})
		ctx := context.Background()
		flaky.Fail()
		for range 5 {
			l.Consume(ctx, "u")
		}
		flaky.Heal()
		if got := obs.Breaker(); len(got) != 1 || !got[0] {
			t.Fatalf("transitions %v, want the breaker open", got)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
					l.Consume(past, "batch")
					cancel()
					tight, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
					l.Consume(tight, "batch")
					cancel()
					time.Sleep(time.Millisecond)
				}
			})
		}
		start := time.Now()
		for {
			if _, err := l.Consume(ctx, "normal"); err == nil {
				break
			}
			if time.Since(start) > time.Second {
				close(stop)
				wg.Wait()
				t.Fatal("no call reached the healed store within 1 s: callers with short deadlines held the probe")
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		if took := time.Since(start); took > 300*time.Millisecond {
			t.Fatalf("the healed store decided again after %v, want the first call after the 250 ms cool-down", took)
		}
	})
}

// panicky panics in Take while its flag is set, else asks Store.
type panicky struct {
	limitstore.Store
	on bool
}

func (p *panicky) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = p.take(ctx, op)
	return err
}

func (p *panicky) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	if p.on {
		panic("store bug")
	}
	return limittest.Take(ctx, p.Store, op)
}

// A store that panics opens the breaker like one that fails: the "opened"
// event and its log line come once, before "closed".
func TestPanickingStoreOpensTheBreakerAloud(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &panicky{Store: ioStore(nil), on: true}
		obs := &limittest.Recorder{}
		var logs limittest.Log
		l := mustNew(t, guarded(t, store, guard.WithObserver(obs), guard.WithLogger(logs.Logger())), limit.Policy{Limit: 1_000_000})
		ctx := context.Background()
		for range 8 {
			if _, err := l.Consume(ctx, "u"); err == nil {
				t.Fatal("a panicking store's call succeeded")
			}
		}
		store.on = false
		time.Sleep(260 * time.Millisecond)
		if _, err := l.Consume(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		if got := obs.Breaker(); len(got) != 2 || !got[0] || got[1] {
			t.Fatalf("transitions %v, want opened then closed", got)
		}
		if logs.Count("circuit breaker open") != 1 || logs.Count("circuit breaker closed") != 1 {
			t.Fatalf("log: %s; want one line when it opened, one when it closed", logs.String())
		}
	})
}

// A probe whose caller goes away before the hung store answers (cancelled,
// or its own deadline passing) learns nothing about the store: the breaker
// is open again, and once the store is back a later decision probes it and
// closes the breaker.
func TestAProbeWhoseCallerLeavesLetsALaterCallProbe(t *testing.T) {
	leave := map[string]func(context.Context) (context.Context, context.CancelFunc){
		"cancelled": func(ctx context.Context) (context.Context, context.CancelFunc) {
			pctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			return pctx, cancel
		},
		"deadline after the timeout": func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, guard.DefaultTimeout+3*time.Millisecond)
		},
	}
	for name, leave := range leave {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				flaky := &limittest.FlakyStore{Store: ioStore(nil)}
				obs := &limittest.Recorder{}
				l := mustNew(t, guarded(t, flaky, guard.WithObserver(obs)), limit.Policy{Limit: 1_000_000})
				ctx := context.Background()
				flaky.Hang()
				if _, err := l.Consume(ctx, "u"); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("hung store: %v, want a timeout", err)
				}
				time.Sleep(300 * time.Millisecond) // the cool-down is over: the next call probes
				pctx, cancel := leave(ctx)
				_, err := l.Consume(pctx, "probe")
				cancel()
				if err == nil || !errors.Is(err, pctx.Err()) {
					t.Fatalf("the probe whose caller left: %v, want its context's error %v", err, pctx.Err())
				}
				flaky.Heal()
				time.Sleep(250 * time.Millisecond)
				if _, err := l.Consume(ctx, "after"); err != nil {
					t.Fatalf("a call after the store healed: %v, want the breaker closed by a new probe", err)
				}
				if got := obs.Breaker(); len(got) != 2 || !got[0] || got[1] {
					t.Fatalf("breaker transitions %v, want opened then closed", got)
				}
			})
		})
	}
}
