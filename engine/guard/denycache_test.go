package guard_test

import (
	"context"
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

func (s *latencyStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *latencyStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.calls.Add(1)
	time.Sleep(time.Duration(s.lat.there.Load()))
	res, err := limittest.Take(ctx, s.Store, op)
	time.Sleep(time.Duration(s.lat.back.Load()))
	return res, err
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

// holdStore decides every Take at once in Store; while armed, the reply of
// the next Take is held back (a network reply in flight) until hold is
// closed. Reset passes straight through.
type holdStore struct {
	*limittest.Store
	armed     atomic.Bool
	evaluated chan struct{}
	hold      chan struct{}
}

func (s *holdStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) error {
	err := s.Store.Take(ctx, op, res)
	if s.armed.CompareAndSwap(true, false) {
		close(s.evaluated)
		<-s.hold
	}
	return err
}

// A denial the store made before a Reset or a Refund through the same
// guard, whose reply reaches the guard after it, is not cached: the next
// decision asks the store, which admits (the Reset forgot the usage, the
// Refund gave the quota back).
func TestADenialInFlightOverAResetOrRefundIsNotCached(t *testing.T) {
	overlaps := map[string]func(l *limit.Limiter, first *limit.Decision) error{
		"reset": func(l *limit.Limiter, _ *limit.Decision) error { return l.Reset(context.Background(), "u") },
		"refund": func(l *limit.Limiter, first *limit.Decision) error {
			l.Finish(context.Background(), first, 503) // not counted: given back through the guard
			return nil
		},
	}
	for name, overlap := range overlaps {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				hs := &holdStore{Store: ioStore(nil), evaluated: make(chan struct{}), hold: make(chan struct{})}
				g := guarded(t, hs, guard.WithTimeout(time.Second))
				l := mustNew(t, g, limit.Policy{Name: "p", Limit: 1, Window: time.Minute, Algorithm: limit.FixedWindow,
					CountStatus: func(status int) bool { return status < 500 }})
				ctx := context.Background()
				first, _ := l.Consume(ctx, "u")
				if !first.Allowed {
					t.Fatal("first denied")
				}
				hs.armed.Store(true)
				var wg sync.WaitGroup
				wg.Go(func() {
					if d, _ := l.Consume(ctx, "u"); d.Allowed {
						t.Error("second admitted")
					}
				})
				<-hs.evaluated // the store denied it, before the overlap
				if err := overlap(l, &first); err != nil {
					t.Fatal(err)
				}
				close(hs.hold) // the denial's reply arrives after it
				wg.Wait()
				calls := hs.Calls()
				d, err := l.Consume(ctx, "u")
				if err != nil || !d.Allowed {
					t.Fatalf("after the %s: %s (store called %d times), %v; the store would admit, the deny cache denies for %v",
						name, d.Outcome, hs.Calls()-calls, err, d.RetryAfter)
				}
			})
		})
	}
}
