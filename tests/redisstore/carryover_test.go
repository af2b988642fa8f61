package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	. "github.com/quotagate/quotagate/stores/redis"
)

// forMemoryAndEachBackend runs f on the memory store and on each Redis
// backend, with a store whose clock reads clock and a key prefix.
func forMemoryAndEachBackend(t *testing.T, clock func() time.Time, f func(t *testing.T, s limitstore.Store, prefix string)) {
	t.Run("memory", func(t *testing.T) {
		ms, err := memstore.New(memstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		f(t, ms, "mem")
	})
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		c := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, c, prefix) })
		f(t, newStore(t, be, WithClock(clock)), prefix)
	})
}

// TestLimitChangeCarriesUsageOverOnEveryStore: one Name, FixedWindow and
// SlidingWindow 100 per minute, 50 used; under a new Limit 10 the
// identity is limited until the window ends, under a new 200 it has 150
// left; a token bucket whose Burst grows keeps the tokens used. On the
// memory store and on Redis (miniredis, standalone, Cluster).
func TestLimitChangeCarriesUsageOverOnEveryStore(t *testing.T) {
	start := time.Now().Truncate(time.Minute).Add(time.Minute + 10*time.Second)
	clock := limittest.NewClock(start)
	forMemoryAndEachBackend(t, clock.Now, func(t *testing.T, s limitstore.Store, prefix string) {
		clock.Set(start)
		ctx := context.Background()
		take := func(l *limit.Limiter, id string, n int64) limit.Decision {
			t.Helper()
			d, err := l.ConsumeN(ctx, id, n)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
			id := alg.String()
			p := limit.Policy{Name: "api", Algorithm: alg, Limit: 100, Window: time.Minute, AlignWindows: true}
			l100 := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
			if d := take(l100, id, 50); !d.Allowed {
				t.Fatalf("%v: 50 of 100 limited", alg)
			}
			p.Limit = 10
			l10 := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
			d := take(l10, id, 1)
			if d.Allowed || d.Remaining != 0 {
				t.Fatalf("%v: new Limit 10 with 50 used: %+v, want limited", alg, d)
			}
			if alg == limit.FixedWindow && d.RetryAfter != 50*time.Second {
				t.Fatalf("new Limit 10 with 50 used: RetryAfter %v, want the 50 s to the window's end", d.RetryAfter)
			}
			p.Limit = 200
			l200 := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
			if d := take(l200, id, 1); !d.Allowed || d.Remaining != 149 {
				t.Fatalf("%v: new Limit 200 with 50 used: %+v, want 150 left before this one", alg, d)
			}
		}
		p := limit.Policy{Name: "bucket", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 10}
		take(limittest.MustNew(s, p, limit.WithKeyPrefix(prefix)), "tb", 6)
		p.Burst = 20
		if d := take(limittest.MustNew(s, p, limit.WithKeyPrefix(prefix)), "tb", 1); !d.Allowed || d.Remaining != 13 {
			t.Fatalf("token bucket Burst 10 -> 20 with 6 used: %+v, want 14 left before this one", d)
		}
	})
}

// TestRollingDeployOnOneRedis: two Limiters with one Name and Limits 10
// and 30 per second (FixedWindow, aligned), as the old and the new
// version of a service during a rolling deploy, decide concurrently on
// one Redis with its own clock: no window admits more than 30.
func TestRollingDeployOnOneRedis(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		if !be.real {
			t.Skip("server time: a real Redis")
		}
		prefix := testPrefix(t)
		c := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, c, prefix) })
		s := newStore(t, be)
		p := limit.Policy{Name: "api", Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second, AlignWindows: true}
		old := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
		p.Limit = 30
		neu := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
		var mu sync.Mutex
		perWindow := map[int64]int{} // admitted per window, by the window's end
		var wg sync.WaitGroup
		stop := time.Now().Add(3 * time.Second)
		for g := range 8 {
			l := old
			if g%2 == 1 {
				l = neu
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					d, err := l.Consume(context.Background(), "k")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						perWindow[d.ResetAt.UnixMilli()/1000]++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		full := 0
		for win, n := range perWindow {
			if n > 30 {
				t.Errorf("window ending %d s admitted %d, more than the larger Limit 30", win, n)
			}
			if n == 30 {
				full++
			}
		}
		t.Logf("%d windows, %d of them at 30", len(perWindow), full)
		if full == 0 {
			t.Error("no window reached 30: the test proves nothing")
		}
	})
}
