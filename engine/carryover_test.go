package limit_test

import (
	"context"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// consumeN consumes cost for id and fails the test on an error.
func consumeN(t *testing.T, l *limit.Limiter, id string, cost int64) limit.Decision {
	t.Helper()
	d, err := l.ConsumeN(context.Background(), id, cost)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestLimitChangeCarriesUsageOver: under one Name, a changed Limit keeps
// what each identity used (50 of an old 100 per minute: a new 10 limits
// until the window ends, a new 200 leaves 150), for both window
// algorithms; a token bucket keeps its time until full (a changed Burst
// keeps the used tokens exactly); a changed Window or Algorithm starts
// afresh.
func TestLimitChangeCarriesUsageOver(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := limittest.NewClock(time.UnixMilli(epochMS))
			store := limittest.NewStore(clock.Now)
			p := limit.Policy{Name: "api", Algorithm: alg, Limit: 100, Window: time.Minute, AlignWindows: true}
			old := mustNew(t, store, p)
			if d := consumeN(t, old, "k", 50); !d.Allowed || d.Remaining != 50 {
				t.Fatalf("50 of 100: %+v", d)
			}
			p.Limit = 10
			lower := mustNew(t, store, p)
			d := consumeN(t, lower, "k", 1)
			if d.Allowed || d.Remaining != 0 {
				t.Fatalf("new Limit 10 with 50 used: %+v, want limited", d)
			}
			if alg == limit.FixedWindow {
				end := time.UnixMilli(epochMS).Truncate(time.Minute).Add(time.Minute)
				if d.RetryAfter != end.Sub(clock.Now()) {
					t.Fatalf("RetryAfter %v, want the end of the window, %v", d.RetryAfter, end.Sub(clock.Now()))
				}
				clock.Set(end)
				if d := consumeN(t, lower, "k", 1); !d.Allowed || d.Remaining != 9 {
					t.Fatalf("new window under Limit 10: %+v", d)
				}
				clock.Set(time.UnixMilli(epochMS))
				store.Clear()
				consumeN(t, old, "k", 50)
			}
			p.Limit = 200
			higher := mustNew(t, store, p)
			if d := consumeN(t, higher, "k", 1); !d.Allowed || d.Remaining != 149 {
				t.Fatalf("new Limit 200 with 50 used: %+v, want 150 left before this one", d)
			}
			// Another window or algorithm: a record of its own.
			p.Window = 2 * time.Minute
			if d := consumeN(t, mustNew(t, store, p), "k", 1); !d.Allowed || d.Remaining != 199 || len(store.Keys()) != 2 {
				t.Fatalf("another Window: %+v, want a fresh record", d)
			}
		})
	}
	t.Run("token-bucket", func(t *testing.T) {
		clock := limittest.NewClock(time.UnixMilli(epochMS))
		store := limittest.NewStore(clock.Now)
		p := limit.Policy{Name: "api", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 10}
		consumeN(t, mustNew(t, store, p), "k", 6)
		p.Burst = 20 // 6 used of 20
		if d := consumeN(t, mustNew(t, store, p), "k", 1); !d.Allowed || d.Remaining != 13 {
			t.Fatalf("Burst 10 -> 20 with 6 used: %+v, want 14 left before this one", d)
		}
		p.Burst = 5 // 7 used of 5: an empty bucket, refilled by the new rate
		d := consumeN(t, mustNew(t, store, p), "k", 1)
		if d.Allowed || d.RetryAfter > 600*time.Millisecond {
			t.Fatalf("Burst 20 -> 5 with 7 used: %+v, want limited, within the 0.6 s to the next token", d)
		}
		p.Algorithm, p.Burst = limit.FixedWindow, 0
		if d := consumeN(t, mustNew(t, store, p), "k", 1); !d.Allowed || d.Remaining != 9 {
			t.Fatalf("another Algorithm: %+v, want a fresh record", d)
		}
	})
}

// TestRollingDeployNeverAdmitsMoreThanTheLargerLimit: two Limiters with
// one Name and Limits 10 and 30 per window on one store, taking turns
// at random (a rolling deploy): no window admits more than 30, and each
// Limiter only while the window's count is below its own Limit.
func TestRollingDeployNeverAdmitsMoreThanTheLargerLimit(t *testing.T) {
	clock := limittest.NewClock(time.UnixMilli(epochMS))
	store := limittest.NewStore(clock.Now)
	p := limit.Policy{Name: "api", Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second, AlignWindows: true}
	a := mustNew(t, store, p)
	p.Limit = 30
	b := mustNew(t, store, p)
	perWindow := map[int64]int64{}
	for i := range 5000 {
		clock.Advance(time.Duration(i%7) * time.Millisecond)
		l := a
		if i%3 == 0 {
			l = b
		}
		win := clock.Now().UnixMilli() / 1000
		if d := consumeN(t, l, "k", 1); d.Allowed {
			perWindow[win]++
			if l == a && perWindow[win] > 10 {
				t.Fatalf("the Limit 10 Limiter admitted the %dth request of window %d", perWindow[win], win)
			}
		}
	}
	full := 0
	for win, n := range perWindow {
		if n > 30 {
			t.Fatalf("window %d admitted %d, more than the larger Limit 30", win, n)
		}
		if n == 30 {
			full++
		}
	}
	if full == 0 {
		t.Fatal("no window reached the larger Limit: the test proves nothing")
	}
}
