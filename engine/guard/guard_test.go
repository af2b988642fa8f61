package guard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// The wrapper against fake stores: the shared deadline and what it
// measures, the circuit breaker, the local deny cache. Timing runs on
// synctest's fake clock: every duration below is exact.

// ioStore is the reference store on clock now (bubble time when nil), named
// "io".
func ioStore(now func() time.Time) *limittest.Store {
	s := limittest.NewStore(now)
	s.Info = limitstore.Info{Name: "io"}
	return s
}

// scriptedStore passes calls to Store after a delay chosen per call (a
// negative delay: never, the call waits for its context), and counts calls.
// A delay of 0 is not available (SlowStore's "never"): the tests use 1 ms.
type scriptedStore struct {
	Store limitstore.Store
	delay func(op *limitstore.Op) time.Duration
	calls atomic.Int64
}

func (s *scriptedStore) Describe() limitstore.Info { return limitstore.Info{Name: "scripted"} }

func (s *scriptedStore) Take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.calls.Add(1)
	d := s.delay(op)
	if d < 0 {
		d = 0 // SlowStore's "never"
	}
	return limittest.SlowStore{Store: s.Store, Delay: d}.Take(ctx, op)
}

type traceKey struct{}

// guarded wraps s with guard.New.
func guarded(t testing.TB, s limitstore.Store, opts ...guard.Option) *guard.Store {
	t.Helper()
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

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

func (s *ctxStore) Take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
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

// The breaker: a store silent for one timeout opens it at once; then no
// decision waits (the FailureMode decides, with ErrCircuitOpen); one probe
// per cool-down; a success closes it. Each transition is reported and
// logged once.
func TestCircuitBreakerSilentStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flaky := &limittest.FlakyStore{Store: ioStore(nil)}
		obs := &limittest.Recorder{}
		var logs logBuffer
		l := mustNew(t, guarded(t, flaky, guard.WithObserver(obs), guard.WithLogger(logs.logger())), limit.Policy{Limit: 1_000_000}, limit.WithObserver(obs))
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
		if got := obs.Breaker(); len(got) != 1 || !got[0] || logs.count("circuit breaker open") != 1 {
			t.Fatalf("transitions %v, %d open lines; want one open, logged once", got, logs.count("circuit breaker open"))
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
		if got := obs.Breaker(); len(got) != 1 || logs.count("circuit breaker") != 1 {
			t.Fatalf("a failed probe reported %v, %d breaker lines; want no new transition", got, logs.count("circuit breaker"))
		}
		flaky.Heal()
		time.Sleep(250 * time.Millisecond)
		if _, err := l.Consume(ctx, "back"); err != nil {
			t.Fatalf("probe after healing: %v", err)
		}
		if got := obs.Breaker(); len(got) != 2 || got[1] || logs.count("circuit breaker closed") != 1 {
			t.Fatalf("transitions %v, %d closed lines; want open then closed, each logged once", got, logs.count("circuit breaker closed"))
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

// A denial is repeated from the deny cache until its Retry-After, with the
// store's own numbers counting down; then the store is asked again and
// admits. Cheaper and dearer requests ask the store.
func TestDenyCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := ioStore(nil)
		counted := &scriptedStore{Store: store, delay: func(*limitstore.Op) time.Duration { return 3 * time.Millisecond }}
		obs := &limittest.Recorder{}
		p := limit.Policy{Name: "q", Limit: 3, Window: 10 * time.Second, Algorithm: limit.FixedWindow, AlignWindows: true,
			Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}
		l := mustNew(t, guarded(t, counted, guard.WithObserver(obs)), p)
		ctx := context.Background()
		r := req("192.0.2.1:1", "/")
		for range 3 {
			if resp := check(l, ctx, r); !resp.Decision.Allowed {
				t.Fatal("denied within the limit")
			}
		}
		fromStore := check(l, ctx, r)
		if fromStore.Decision.Allowed || counted.calls.Load() != 4 {
			t.Fatalf("fourth request: %+v", fromStore.Decision)
		}
		time.Sleep(2 * time.Second)
		cached := check(l, ctx, r)
		if counted.calls.Load() != 4 || obs.Skipped("deny-cache") != 1 {
			t.Fatalf("the store was asked (%d calls, %d cache answers): want the cache to answer", counted.calls.Load(), obs.Skipped("deny-cache"))
		}
		if cached.Status != fromStore.Status || string(cached.Body) != string(fromStore.Body) ||
			cached.Decision.Outcome != limit.OutcomeLimited || cached.Decision.Remaining != 0 || cached.Decision.StoreFailed {
			t.Fatalf("cached denial %+v (%d), store's %+v (%d): want the same answer", cached.Decision, cached.Status, fromStore.Decision, fromStore.Status)
		}
		if got, want := cached.Decision.RetryAfter, fromStore.Decision.RetryAfter-2*time.Second; got != want {
			t.Fatalf("cached RetryAfter %v, want the store's counted down: %v", got, want)
		}
		for _, h := range []string{"Retry-After", "Ratelimit", "Ratelimit-Policy", "Ratelimit-Limit", "Ratelimit-Remaining", "X-Ratelimit-Reset", "Cache-Control", "Content-Type"} {
			if h == "Retry-After" || h == "Ratelimit" {
				continue // count down: checked below
			}
			if cached.Header.Get(h) != fromStore.Header.Get(h) {
				t.Errorf("%s: cached %q, store's %q", h, cached.Header.Get(h), fromStore.Header.Get(h))
			}
		}
		ra, _ := strconv.Atoi(fromStore.Header.Get("Retry-After"))
		if got := cached.Header.Get("Retry-After"); got != strconv.Itoa(ra-2) {
			t.Errorf("cached Retry-After %q, want %d (the store's %d, 2 s later)", got, ra-2, ra)
		}
		// A cheaper request and a dearer one ask the store.
		if d, _ := l.ConsumeN(ctx, "other", 1); !d.Allowed {
			t.Fatal("other identity denied")
		}
		calls := counted.calls.Load()
		dear, _ := l.ConsumeN(ctx, "other", 3) // 1 used: 3 more do not fit
		cheap, _ := l.ConsumeN(ctx, "other", 2)
		if dear.Allowed || !cheap.Allowed || counted.calls.Load() != calls+2 {
			t.Fatalf("dear %v, cheap %v, %d calls: a cost other than the cached one must ask the store", dear.Allowed, cheap.Allowed, counted.calls.Load()-calls)
		}
		// When the denial's T passes, the store is asked and admits.
		time.Sleep(fromStore.Decision.RetryAfter - 2*time.Second)
		calls = counted.calls.Load()
		if resp := check(l, ctx, r); !resp.Decision.Allowed || counted.calls.Load() != calls+1 {
			t.Fatalf("at T: %+v after %d calls; want the store asked and admitting", resp.Decision, counted.calls.Load()-calls)
		}
	})
}

// No request the store would admit is denied by the cache, and the cache
// admits nothing itself: replicas (separate Store values, as separate
// clients of one Redis, each with its own deny cache) over one shared state,
// with a call latency and a server clock offset, decide a random sequence
// exactly as the same replicas without a deny cache do. A denial from the
// cache is compared with the store's answer at the same instant (a call
// without latency), since it is an answer as of that instant; a call that
// reaches the store is compared with one of the same latency.
func TestDenyCacheAgreesWithTheStore(t *testing.T) {
	for seed := range uint64(6) {
		t.Run("seed"+strconv.FormatUint(seed, 10), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 99))
				offset := time.Duration(rng.Int64N(int64(time.Hour))) - 30*time.Minute
				serverNow := func() time.Time { return time.Now().Add(offset) }
				type world struct {
					lims  [3]*limit.Limiter
					calls atomic.Int64
					lat   latency
				}
				algo := []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}[seed%3]
				build := func(cache bool) *world {
					w := &world{}
					backing := limittest.NewStore(serverNow)
					for i := range w.lims {
						replica := &latencyStore{Store: backing, lat: &w.lat, calls: &w.calls}
						opts := []guard.Option{guard.WithTimeout(time.Second)}
						if !cache {
							opts = append(opts, guard.WithoutDenyCache())
						}
						w.lims[i] = mustNew(t, guarded(t, replica, opts...), limit.Policy{Name: "m", Limit: 5, Window: 2 * time.Second, Algorithm: algo})
					}
					return w
				}
				// Both worlds see the same sequence at the same instants; a
				// world's replicas share its backing state.
				with, without := build(true), build(false)
				var admitted, hits int
				for step := range 3000 {
					who := "id" + strconv.Itoa(rng.IntN(3))
					replica := rng.IntN(3)
					cost := int64(1 + rng.IntN(2))
					there, back := int64(rng.IntN(5000))*int64(time.Microsecond), int64(rng.IntN(5000))*int64(time.Microsecond)
					with.lat.there.Store(there)
					with.lat.back.Store(back)
					callsBefore := with.calls.Load()
					var dw, dn limit.Decision
					var errW, errN error
					var wg sync.WaitGroup
					wg.Go(func() { dw, errW = with.lims[replica].ConsumeN(context.Background(), who, cost) })
					synctest.Wait() // answered from the cache, or waiting for the store: no time has passed
					hit := with.calls.Load() == callsBefore
					if hit {
						there, back = 0, 0
						hits++
					}
					without.lat.there.Store(there)
					without.lat.back.Store(back)
					wg.Go(func() { dn, errN = without.lims[replica].ConsumeN(context.Background(), who, cost) })
					wg.Wait()
					if errW != nil || errN != nil {
						t.Fatal(errW, errN)
					}
					if dw.Allowed != dn.Allowed {
						t.Fatalf("step %d (%s on replica %d, cost %d, from the cache %v): with the cache %v, without %v", step, who, replica, cost, hit, dw.Allowed, dn.Allowed)
					}
					if dw.Allowed {
						admitted++
					}
					time.Sleep(time.Duration(rng.IntN(40_000)) * time.Microsecond)
				}
				t.Logf("%s: %d admitted, %d of 3000 answered by a deny cache", algo, admitted, hits)
				if hits == 0 || admitted == 0 {
					t.Fatal("the sequence never used the cache, or never admitted: it tests nothing")
				}
			})
		})
	}
}

// The store reads its clock in whole milliseconds: a denial's end, counted
// from the truncated reading, may come up to 1 ms before the call's start
// plus RetryAfter. The cache stops a millisecond early so that it never
// denies what the store admits.
func TestDenyCacheStoreClockTruncation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The server's clock is 0.7 ms ahead: at every whole bubble
		// millisecond it reads the same ms, 0.7 ms late.
		store := ioStore(func() time.Time { return time.Now().Add(700 * time.Microsecond) })
		l := mustNew(t, guarded(t, store), limit.Policy{Limit: 1, Window: time.Second, Algorithm: limit.FixedWindow, AlignWindows: true})
		ctx := context.Background()
		l.Consume(ctx, "u")
		if d, _ := l.Consume(ctx, "u"); d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("second call: %+v, want denied for the 1 s window", d)
		}
		// The window ends when the server's clock reads 1000 ms: 999.3 ms
		// into the bubble.
		time.Sleep(999*time.Millisecond + 500*time.Microsecond)
		if d, _ := l.Consume(ctx, "u"); !d.Allowed {
			t.Fatalf("after the server's window ended: %+v, want the store asked and admitting", d)
		}
	})
}

// latency is the one-way delays of the current step, ns.
type latency struct{ there, back atomic.Int64 }

// latencyStore is one replica's client of a shared backing store: a call
// reaches the store lat.there after it starts and comes back lat.back after
// that (synctest time), so the store evaluates inside the call.
type latencyStore struct {
	Store limitstore.Store
	lat   *latency
	calls *atomic.Int64
}

func (s *latencyStore) Take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.calls.Add(1)
	time.Sleep(time.Duration(s.lat.there.Load()))
	res, err := s.Store.Take(ctx, op)
	time.Sleep(time.Duration(s.lat.back.Load()))
	return res, err
}

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

// A refund (Limiter.Finish) drops the wrapper's cached denial of its key:
// the next request asks the store, which admits it.
func TestFinishRefundDropsCachedDenial(t *testing.T) {
	ref := limittest.NewStore(nil)
	l := limittest.MustNew(guarded(t, ref), limit.Policy{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour,
		CountStatus: func(s int) bool { return s >= 400 }})
	ctx := context.Background()
	first, _ := l.Consume(ctx, "a") // its handler is still running
	for range 3 {
		if d, _ := l.Consume(ctx, "a"); d.Allowed {
			t.Fatal("admitted over the limit")
		}
	}
	calls := ref.Calls()
	if d, _ := l.Consume(ctx, "a"); d.Allowed || ref.Calls() != calls {
		t.Fatal("the denial was not cached")
	}
	l.Finish(ctx, &first, 200)
	if d, _ := l.Consume(ctx, "a"); !d.Allowed {
		t.Fatal("after the refund the cached denial still answered")
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
