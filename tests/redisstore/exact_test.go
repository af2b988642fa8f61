package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
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
	forEachBackendAndAlgorithm(t, func(t *testing.T, be *backend, alg limit.Algorithm, prefix string) {
		p := limit.Policy{Algorithm: alg, Limit: quota, FailureMode: limit.FailClosed}
		if alg != limit.SlidingWindow {
			// No window boundary or refill inside a burst.
			p.Window = 24 * time.Hour
		}
		var lims [limiters]*limit.Limiter
		for i := range lims {
			lims[i] = limittest.MustNew(newStore(t, be), p,
				limit.WithKeyPrefix(prefix))
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
	res, err := limittest.Take(context.Background(), s, &op)
	if err != nil {
		t.Fatal(err)
	}
	if res.NowMS != at.UnixMilli() {
		t.Errorf("NowMS %d, want the server's %d (process clock %d)", res.NowMS, at.UnixMilli(), time.Now().UnixMilli())
	}
}

// fakeClockStores returns the Redis store (on be, deciding at *now) and a
// memory store at the same clock.
func fakeClockStores(t *testing.T, be *backend, now *int64) (*Store, *memstore.Store, string) {
	t.Helper()
	clock := func() time.Time { return time.UnixMilli(*now) }
	prefix := testPrefix(t)
	client := be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	rs, err := New(client, WithClock(clock), WithoutGuard())
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return rs, ms, prefix
}

// TestSteadyRateNoDrift: token-bucket rates whose emission interval is not a
// whole number of milliseconds (3 per second, 7 per minute, 3 000 per
// second), a client asking as fast as it is allowed (it comes back exactly
// after each RetryAfter) on a fake clock: both stores admit exactly the
// burst plus one per W/Limit ms over 1 000 windows (20 windows at 3 000 per
// second: 60 000 round trips; on miniredis, which interprets Lua in Go, 300
// windows at 7 per minute and 2 at 3 000 per second), never drifting, and
// agree at every step. engine's TestSteadyRateNoDrift runs 1 000 windows of
// each on Apply.
func TestSteadyRateNoDrift(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		for _, r := range []struct{ limit, w, windows int64 }{{3, 1000, 1000}, {7, 60_000, 1000}, {3000, 1000, 20}} {
			if !be.real { // miniredis interprets Lua in Go: fewer round trips
				r.windows = map[int64]int64{3: 1000, 7: 300, 3000: 2}[r.limit]
			}
			t.Run(fmt.Sprintf("%dp%dms", r.limit, r.w), func(t *testing.T) {
				now := int64(1_767_225_600_000)
				rs, ms, prefix := fakeClockStores(t, be, &now)
				op := oneQuota(opKey(prefix, "drift", limit.TokenBucket, "u"),
					limitstore.Quota{Algorithm: limit.TokenBucket, Limit: r.limit, WindowMS: r.w, Burst: r.limit}, 1)
				start, end := now, now+r.windows*r.w
				// A real server counts a key's TTL down in real time, which
				// this fake clock does not follow: the store sets the TTL
				// from the state's life on the fake clock (about 1 s at 3 000
				// per second), and the burst at start (3 000 round trips at
				// one fake instant) outlasted it on a loaded machine (-race,
				// CI), the key expiring mid-burst. So the test keeps the key
				// alive (PEXPIRE; the store never reads the TTL, it keeps
				// its own copy of the deadline in the value).
				var admin rueidis.Client
				if be.real {
					admin = be.newClient(t)
				}
				key := string(op.Quotas[0].Key)
				var admitted int64
				for n := 0; now < end; n++ {
					if admin != nil && n%256 == 0 {
						if err := admin.Do(context.Background(), admin.B().Pexpire().Key(key).Milliseconds(600_000).Build()).Error(); err != nil {
							t.Fatal(err)
						}
					}
					got, err := takeOne(rs, &op)
					if err != nil {
						t.Fatal(err)
					}
					if want, _ := takeOne(ms, &op); got != want {
						t.Fatalf("at %d: redis %+v, memory %+v", now-start, got, want)
					}
					if got.Allowed {
						admitted++
						continue
					}
					now += got.Quotas[0].RetryAfterMS
				}
				// The burst at start, then the k-th more at start + k*W/Limit
				// exactly, admitted at that instant rounded up to the ms.
				if want := r.limit + (r.windows*r.w-1)*r.limit/r.w; admitted != want {
					t.Errorf("%d admitted over %d windows, want exactly %d", admitted, r.windows, want)
				}
			})
		}
	})
}

// maxWait is a policy's own longest wait for cost 1 (DESIGN.md, clock
// steps): a window (fixed), a window and a slot (sliding), the refill time
// (token bucket).
func maxWait(q *limitstore.Quota) int64 {
	switch q.Algorithm {
	case limit.FixedWindow:
		return q.WindowMS
	case limit.TokenBucket:
		return refillMS(q)
	}
	return q.WindowMS + (q.WindowMS+q.Limit-1)/q.Limit
}

// 10 per minute, a client uses its 10, then the server clock steps
// back 1 h (a failover to a replica whose clock is behind). Retry-After is
// at most the policy's own maximum plus 1 s (it was 1 h 0 m 6 s), the client
// is admitted when it says, and nothing is admitted early. On miniredis the
// store reads the server's own TIME (set back with SetTime); on the real
// servers the clock is injected (WithClock); the memory store runs the same
// steps.
func TestBackwardServerClockStep(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			q := limitstore.Quota{Algorithm: alg, Limit: 10, WindowMS: 60_000, Burst: 10, PhaseMS: 12_345}
			if alg == limit.TokenBucket {
				q.PhaseMS = 0
			}
			run := func(t *testing.T, s limitstore.Store, key string, set func(ms int64)) {
				ctx := ctxT(t)
				op := oneQuota(key, q, 1)
				now := int64(1_767_225_630_000)
				set(now)
				for i := range 10 {
					if res, err := limittest.Take(ctx, s, &op); err != nil || !res.Allowed {
						t.Fatalf("request %d: %+v, %v", i, res, err)
					}
				}
				now -= 3_600_000
				set(now)
				res, err := limittest.Take(ctx, s, &op)
				if err != nil {
					t.Fatal(err)
				}
				retry := res.Quotas[0].RetryAfterMS
				if res.Allowed || retry <= 0 || retry > maxWait(&q)+1000 {
					t.Fatalf("after the step: %+v, want a denial with 0 < RetryAfter <= %d ms", res, maxWait(&q)+1000)
				}
				set(now + retry - 1)
				if res, _ := limittest.Take(ctx, s, &op); res.Allowed {
					t.Fatalf("admitted 1 ms before RetryAfter %d", retry)
				}
				set(now + retry)
				if res, err := limittest.Take(ctx, s, &op); err != nil || !res.Allowed {
					t.Fatalf("at RetryAfter %d: %+v, %v", retry, res, err)
				}
			}
			t.Run("memory", func(t *testing.T) {
				var now int64
				ms, err := memstore.New(memstore.WithClock(func() time.Time { return time.UnixMilli(now) }))
				if err != nil {
					t.Fatal(err)
				}
				run(t, ms, "c11:{x}:k", func(ms int64) { now = ms })
			})
			t.Run("miniredis-server-time", func(t *testing.T) {
				mr := miniBackendServer(t)
				// The server's clock is set by hand: no deny cache, whose
				// entries count down on this process's clock.
				s := newStore(t, miniBackendOf(mr), WithoutGuard())
				run(t, s, opKey(testPrefix(t), "c11", alg, "u"), func(ms int64) { mr.SetTime(time.UnixMilli(ms)) })
			})
			t.Run("standalone-injected-clock", func(t *testing.T) {
				var now int64
				be := standaloneBackend(t)
				s := newStore(t, be, WithClock(func() time.Time { return time.UnixMilli(now) }))
				prefix := testPrefix(t)
				t.Cleanup(func() { deleteKeys(t, s.Client(), prefix) })
				run(t, s, opKey(prefix, "c11", alg, "u"), func(ms int64) { now = ms })
			})
		})
	}
}

// TestExactSeveralQuotasAndRefunds: 4 stores, each on its own client (as 4
// processes would be), x 50 goroutines on one identity whose Op has two
// quotas (100 and 60 per day, or per day-long bucket); every goroutine takes
// 4 times and refunds every other charge it got, racing the others' takes.
// The net admitted (admitted minus refunded) never exceeds the tighter
// quota, and the stored state is exactly that net on both quotas (no charge
// lost, no refund credited twice), for every algorithm and on every
// backend.
func TestExactSeveralQuotasAndRefunds(t *testing.T) {
	const (
		stores     = 4
		goroutines = 50
		attempts   = 4
	)
	forEachBackendAndAlgorithm(t, func(t *testing.T, be *backend, alg limit.Algorithm, prefix string) {
		t.Cleanup(func() { deleteKeys(t, be.newClient(t), prefix) })
		op := limitstore.Op{Cost: 1, N: 2}
		// Day-long windows whose boundary is 12 h away: none rolls
		// during the test.
		phase := (time.Now().UnixMilli() + 43_200_000) % 86_400_000
		if alg == limit.TokenBucket {
			phase = 0
		}
		for i, lim := range []int64{100, 60} {
			op.Quotas[i] = limitstore.Quota{Algorithm: alg, Limit: lim, WindowMS: 86_400_000, Burst: lim, PhaseMS: phase,
				Key: []byte(taggedKey(prefix, "{x}", fmt.Sprint("q", i), alg, "u"))}
		}
		var ss [stores]*Store
		for i := range ss {
			ss[i] = newStore(t, be)
		}
		ctx := ctxT(t)
		var admitted, refunded atomic.Int64
		var firstErr atomic.Value
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range ss {
			for g := range goroutines {
				wg.Go(func() {
					<-start
					for a := range attempts {
						o := op
						res, err := limittest.Take(ctx, s, &o)
						if err != nil {
							firstErr.CompareAndSwap(nil, err)
							return
						}
						if !res.Allowed {
							continue
						}
						admitted.Add(1)
						if (g+a)%2 == 0 {
							o.Refund = true
							for j := range o.N {
								o.Quotas[j].Window = res.Quotas[j].Window
							}
							if _, err := limittest.Take(ctx, s, &o); err != nil {
								firstErr.CompareAndSwap(nil, err)
								return
							}
							refunded.Add(1)
						}
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if e := firstErr.Load(); e != nil {
			t.Fatal(e)
		}
		net := admitted.Load() - refunded.Load()
		t.Logf("%d admitted, %d refunded, net %d", admitted.Load(), refunded.Load(), net)
		if net > 60 || admitted.Load() < 60 {
			t.Errorf("net admitted %d (of %d), want at most 60 (the tighter quota) and a full quota admitted", net, admitted.Load())
		}
		// The stored state is the net, exactly: no charge lost, no
		// refund credited twice or past its charge.
		probe := op
		probe.Cost = 0
		res, err := limittest.Take(ctx, ss[0], &probe)
		if err != nil {
			t.Fatal(err)
		}
		if res.Quotas[0].Remaining != 100-net || res.Quotas[1].Remaining != 60-net {
			t.Errorf("stored state: %+v, want %d and %d remaining", res, 100-net, 60-net)
		}
	})
}

// TestRefundNeverCreatesAKey: a refund of a charge whose key is gone (or was
// never written) writes nothing, on every backend.
func TestRefundNeverCreatesAKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newStore(t, be)
		prefix := testPrefix(t)
		t.Cleanup(func() { deleteKeys(t, s.Client(), prefix) })
		for _, op := range ttlOps(prefix, "ghost") {
			op.Refund, op.Quotas[0].Window = true, 123
			res, err := limittest.Take(context.Background(), s, &op)
			if err != nil || !res.Allowed || res.Quotas[0].TTLMS != 0 {
				t.Fatalf("%v: %+v, %v", op.Quotas[0].Algorithm, res, err)
			}
		}
		if keys := scanKeys(t, s.Client(), prefix); len(keys) != 0 {
			t.Errorf("refunds created %v", keys)
		}
	})
}
