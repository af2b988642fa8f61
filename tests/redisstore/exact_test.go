package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	. "github.com/quotagate/quotagate/stores/redis"
)

// TestExactAcrossClients: 4 limiters, each on its own rueidis client (as 4
// processes would be), x 50 goroutines released together on one key with
// limit 100: exactly 100 are admitted, in each of 20 repetitions, for every
// algorithm, on a real server and a real Cluster (and miniredis).
func TestExactAcrossClients(t *testing.T) {
	const (
		limiters   = 4
		goroutines = 50
		reps       = 20
		quota      = 100
	)
	forEachBackend(t, func(t *testing.T, be *backend) {
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				prefix := testPrefix(t)
				p := limit.Policy{Algorithm: alg, Limit: quota, FailureMode: limit.FailClosed}
				if alg != limit.SlidingWindow {
					// No window boundary or refill inside a burst.
					p.Window = 24 * time.Hour
				}
				var lims [limiters]*limit.Limiter
				for i := range lims {
					lims[i] = limittest.MustNew(newStore(t, be), p,
						limit.WithKeyPrefix(prefix), limit.WithStoreTimeout(10*time.Second))
				}
				t.Cleanup(func() { deleteKeys(t, be.newClient(t), prefix) })
				ctx := ctxT(t)
				for rep := range reps {
					id := fmt.Sprintf("rep%d", rep)
					var allowed, failed atomic.Int64
					var firstErr atomic.Value
					start := make(chan struct{})
					var wg sync.WaitGroup
					for _, l := range lims {
						for range goroutines {
							wg.Go(func() {
								<-start
								d, err := l.Consume(ctx, id)
								if err != nil {
									failed.Add(1)
									firstErr.CompareAndSwap(nil, err)
								}
								if d.Allowed {
									allowed.Add(1)
								}
							})
						}
					}
					close(start)
					wg.Wait()
					if failed.Load() != 0 {
						t.Fatalf("rep %d: %d store errors, first: %v", rep, failed.Load(), firstErr.Load())
					}
					if got := allowed.Load(); got != quota {
						t.Errorf("rep %d: %d of %d admitted, want exactly %d", rep, got, limiters*goroutines, quota)
					}
				}
			})
		}
	})
}

// TestClockSkew: two limiters whose application clocks are 10 s apart. A
// store deciding on those app clocks (WithClock) admits twice the limit
// across a window boundary, which is the failure server time prevents; with
// the default server TIME, the same two limiters (their app clocks still
// drive their FailLocal stores) admit exactly the limit and agree on the
// window's reset instant.
func TestClockSkew(t *testing.T) {
	const quota = 10
	forEachBackend(t, func(t *testing.T, be *backend) {
		base := time.Now()
		appClocks := [2]func() time.Time{
			func() time.Time { return base },
			func() time.Time { return base.Add(10 * time.Second) },
		}
		ctx := ctxT(t)

		t.Run("app-clocks", func(t *testing.T) {
			prefix := testPrefix(t)
			t.Cleanup(func() { deleteKeys(t, be.newClient(t), prefix) })
			p := limit.Policy{Algorithm: limit.FixedWindow, Limit: quota, Window: 10 * time.Second, AlignWindows: true}
			allowed := 0
			for _, clock := range appClocks { // the slow clock first, then the fast one
				l := limittest.MustNew(newStore(t, be, WithClock(clock)), p, limit.WithKeyPrefix(prefix))
				for range quota + 5 {
					d, err := l.Consume(ctx, "client")
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
				}
			}
			t.Logf("decided on app clocks 10 s apart: %d admitted for a limit of %d", allowed, quota)
			if allowed != 2*quota {
				t.Errorf("app clocks 10 s apart: %d admitted, want %d (one window each)", allowed, 2*quota)
			}
		})

		for _, alg := range algorithms {
			t.Run("server-time/"+alg.String(), func(t *testing.T) {
				prefix := testPrefix(t)
				t.Cleanup(func() { deleteKeys(t, be.newClient(t), prefix) })
				p := limit.Policy{Algorithm: alg, Limit: quota, Window: time.Hour, FailureMode: limit.FailLocal}
				if alg == limit.FixedWindow {
					p.AlignWindows = true
				}
				var lims [2]*limit.Limiter
				for i, clock := range appClocks {
					local, err := memstore.New(memstore.WithClock(clock))
					if err != nil {
						t.Fatal(err)
					}
					lims[i] = limittest.MustNew(newStore(t, be), p, limit.WithKeyPrefix(prefix), limit.WithLocalStore(local))
				}
				allowed := 0
				var resets []time.Time
				for i := range 3 * quota { // interleaved
					d, err := lims[i%2].Consume(ctx, "client")
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
						if alg == limit.FixedWindow {
							resets = append(resets, d.ResetAt)
						}
					}
				}
				if allowed != quota {
					t.Errorf("server time: %d admitted, want exactly %d", allowed, quota)
				}
				for _, r := range resets {
					if !r.Equal(resets[0]) {
						t.Errorf("limiters disagree on the window's end: %v and %v", resets[0], r)
						break
					}
				}
			})
		}
	})
}

// TestServerTimeIsTheServers: without WithClock, NowMS is the Redis
// server's TIME (checked against miniredis' settable clock, a year away from
// the process clock).
func TestServerTimeIsTheServers(t *testing.T) {
	mr := miniBackendServer(t)
	at := time.Now().Add(365 * 24 * time.Hour).Truncate(time.Millisecond)
	mr.SetTime(at)
	s := newStore(t, miniBackendOf(mr))
	op := ttlOps(testPrefix(t), "x")[0]
	res, err := s.Take(context.Background(), &op)
	if err != nil {
		t.Fatal(err)
	}
	if res.NowMS != at.UnixMilli() {
		t.Errorf("NowMS %d, want the server's %d (process clock %d)", res.NowMS, at.UnixMilli(), time.Now().UnixMilli())
	}
}
