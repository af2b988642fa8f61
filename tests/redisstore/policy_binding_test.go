package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// On Redis: one Name, two policies (FixedWindow 5 per hour and 5 per
// second), alternating on one identity. They shared one
// key: the hour's limiter answered a Retry-After of ~242 years and the key
// got a TTL of ~205 000 years. Each policy now has its own key (the key
// carries the policy's state signature), so every delay stays within the
// hour and every TTL within its own policy's bound (a window plus 1 s).
func TestRegressionOneNameTwoPolicies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newStore(t, be)
		prefix := testPrefix(t)
		hour := limittest.MustNew(s, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour}, limit.WithKeyPrefix(prefix))
		sec := limittest.MustNew(s, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second}, limit.WithKeyPrefix(prefix))
		ctx := context.Background()
		for i := 0; i < 10; i++ {
			for _, l := range []*limit.Limiter{hour, sec} {
				d, err := l.Consume(ctx, "id")
				if err != nil || d.RetryAfter > time.Hour || d.ResetAfter > time.Hour || d.RetryAfter < 0 || d.ResetAfter < 0 {
					t.Fatalf("call %d: %+v, %v: want every delay within the hour", i, d, err)
				}
			}
		}
		c := be.newClient(t)
		keys := scanKeys(t, c, prefix)
		bounds := map[string]int64{}
		for _, k := range keys {
			switch {
			case strings.Contains(k, ":x:p3600f:"):
				bounds[k] = time.Hour.Milliseconds() + 1000
			case strings.Contains(k, ":x:p1f:"):
				bounds[k] = 2000
			}
		}
		if len(keys) != 2 || len(bounds) != 2 {
			t.Fatalf("keys %q, want one per policy", keys)
		}
		checkTTLs(t, c, prefix, bounds, true)
	})
}

// On Redis: two Limiters built separately from one policy with no Name
// shared one allowance without saying so. New now refuses the
// second while the first is alive on the store; one Name on both shares on
// purpose, in one key.
func TestRegressionIdenticalLimitersDoNotShareSilently(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newStore(t, be)
		prefix := testPrefix(t)
		p := limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
		a := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
		if _, err := limit.New(s, p, limit.WithKeyPrefix(prefix)); !errors.Is(err, limit.ErrInvalidPolicy) {
			t.Fatalf("second unnamed Limiter with the same numbers: %v, want ErrInvalidPolicy", err)
		}
		p.Name = "shared"
		b1, b2 := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix)), limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
		ctx := context.Background()
		for i := 0; i < 5; i++ {
			[]*limit.Limiter{b1, b2}[i%2].Consume(ctx, "u")
		}
		if d, _ := b2.Consume(ctx, "u"); d.Allowed {
			t.Fatal("one Name on both: the 6th call was admitted, want the one allowance of 5")
		}
		if keys := scanKeys(t, be.newClient(t), prefix); len(keys) != 1 {
			t.Fatalf("keys %q, want the one shared key", keys)
		}
		runtime.KeepAlive(a)
	})
}

// Every policy on the boundary of what limit.New accepts writes keys whose
// TTL is within its own bound (a window plus 1 s, two windows, twice the
// refill time): no key outlives its policy, none lacks a TTL (in-range
// TTLs on both stores; the memory store's are checked through
// conformance.RunStore's numbers).
func TestBoundaryPoliciesKeepTTLsInRange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newStore(t, be)
		c := be.newClient(t)
		base := testPrefix(t)
		ctx := context.Background()
		for i, p := range limittest.BoundaryPolicies(t, rand.New(rand.NewPCG(5, 12))) {
			prefix := base + "b" + strconv.Itoa(i)
			l := limittest.MustNew(s, p, limit.WithKeyPrefix(prefix))
			capacity := p.Limit
			if p.Algorithm == limit.TokenBucket {
				capacity = p.Burst
			}
			for _, cost := range []int64{capacity, 1, 1} {
				if _, err := l.ConsumeN(ctx, "id", cost); err != nil {
					t.Fatalf("%+v: %v", p, err)
				}
			}
			// A token bucket's key deadline is its TAT plus one refill time
			// (DESIGN.md, "Store keys": bound twice the refill time; the
			// script rounds each half up to the ms).
			bound := limittest.MaxDelayMS(p)
			if p.Algorithm == limit.TokenBucket {
				bound = 2*bound + 2
			}
			bounds := map[string]int64{}
			for _, k := range scanKeys(t, c, prefix) {
				bounds[k] = bound
			}
			if len(bounds) == 0 && limittest.MaxDelayMS(p) >= 10_000 {
				t.Fatalf("%+v wrote no key", p) // (keys of millisecond windows may be gone already)
			}
			checkTTLs(t, c, prefix, bounds, true)
		}
	})
}

// On Redis: two services (two Store values, as two processes) with the same
// policy and the default key prefix drew on one allowance per client. New
// now refuses the default prefix on Redis; with a prefix per service each
// service has its own allowance, and a replica of one (a third Store value,
// the same prefix) shares that service's.
func TestTwoServicesOnOneRedisKeepTheirOwnAllowances(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		p := limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Hour}
		if _, err := limit.New(newStore(t, be), p); !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithKeyPrefix") {
			t.Fatalf("New on Redis with the default prefix: %v; want ErrInvalidOption naming WithKeyPrefix", err)
		}
		prefix := testPrefix(t)
		orders := limittest.MustNew(newStore(t, be), p, limit.WithKeyPrefix(prefix+"-orders"))
		users := limittest.MustNew(newStore(t, be), p, limit.WithKeyPrefix(prefix+"-users"))
		replica := limittest.MustNew(newStore(t, be), p, limit.WithKeyPrefix(prefix+"-orders"))
		ctx := context.Background()
		admitted := func(l *limit.Limiter, n int) (k int) {
			for range n {
				if d, err := l.Consume(ctx, "c"); err == nil && d.Allowed {
					k++
				}
			}
			return k
		}
		if o, u := admitted(orders, 2), admitted(users, 2); o != 2 || u != 2 {
			t.Fatalf("orders admitted %d of 2, users %d of 2; want each its own allowance", o, u)
		}
		if n := admitted(replica, 1); n != 0 {
			t.Fatalf("a replica of orders admitted %d after orders spent the allowance; want 0 (one allowance per service)", n)
		}
	})
}
