package limit_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// maxRefill is the longest TokenBucket refill New accepts (365 days).
const maxRefill = 365 * 24 * time.Hour

// C-07: a TokenBucket whose refill takes centuries (Limit 1000 per 1 s,
// Burst 1e13: 317 years) overflowed time.Duration. New rejects it, naming
// Burst; at the largest accepted refill (maxRefill), a whole-bucket request
// and then one more give in-range Durations and header values.
func TestCaseC07DurationOverflow(t *testing.T) {
	_, err := limit.New(storeAt(0), limit.Policy{Algorithm: limit.TokenBucket, Limit: 1000, Window: time.Second, Burst: 1e13})
	if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Burst") {
		t.Fatalf("New: %v, want ErrInvalidPolicy naming Burst", err)
	}
	for _, p := range []limit.Policy{
		{Limit: 1, Window: 24 * time.Hour, Burst: 365},            // refill exactly maxRefill
		{Limit: 1000, Window: time.Second, Burst: 31_536_000_000}, // the same at 1000/s
		{Limit: 7, Window: time.Minute, Burst: 3_679_200},         // 7/min, a year's worth
	} {
		p.Algorithm, p.Disclosure, p.HeaderStyle = limit.TokenBucket, limit.DiscloseAlways, limit.HeadersIETF|limit.HeadersTriplet|limit.HeadersLegacy
		store := storeAt(1_767_225_600_000)
		l := mustNew(t, store, p)
		ctx := context.Background()
		for _, cost := range []int64{p.Burst, 1} {
			d, err := l.ConsumeN(ctx, "u", cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.ResetAfter <= 0 || d.ResetAfter > maxRefill || d.RetryAfter < 0 || d.RetryAfter > maxRefill {
				t.Errorf("%+v cost %d: ResetAfter %v RetryAfter %v, want within (0, %v]", p, cost, d.ResetAfter, d.RetryAfter, maxRefill)
			}
			if d.ResetAt.Year() > 2027 {
				t.Errorf("%+v cost %d: ResetAt %v", p, cost, d.ResetAt)
			}
		}
		h := check(l, ctx, req("192.0.2.1:1", "/")).Header
		epoch, err := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64)
		if err != nil || epoch < store.now()/1000 || epoch > (store.now()+maxRefill.Milliseconds())/1000+1 {
			t.Errorf("%+v: X-RateLimit-Reset %q, now %d s", p, h.Get("X-Ratelimit-Reset"), store.now()/1000)
		}
		if reset, err := strconv.ParseInt(h.Get("Ratelimit-Reset"), 10, 64); err != nil || reset < 0 || reset > int64(maxRefill/time.Second)+1 {
			t.Errorf("%+v: RateLimit-Reset %q", p, h.Get("Ratelimit-Reset"))
		}
	}
}

// C-13: TokenBucket at 3 per second, 7 per minute and 3 000 per second is
// accepted and admits exactly the rate through a Limiter (here over 20
// windows; TestSteadyRateNoDrift runs Apply over 1 000).
func TestCaseC13TokenBucketCommonRates(t *testing.T) {
	for _, r := range []struct {
		limit  int64
		window time.Duration
	}{{3, time.Second}, {7, time.Minute}, {3000, time.Second}} {
		store := storeAt(1_767_225_600_000)
		l, err := limit.New(store, limit.Policy{Algorithm: limit.TokenBucket, Limit: r.limit, Window: r.window})
		if err != nil {
			t.Fatalf("%d per %v: %v", r.limit, r.window, err)
		}
		ctx := context.Background()
		start, end := store.now(), store.now()+20*r.window.Milliseconds()
		var admitted int64
		for store.now() < end {
			d, _ := l.Consume(ctx, "u")
			if d.Allowed {
				admitted++
				continue
			}
			store.advance(d.RetryAfter.Milliseconds())
		}
		w := r.window.Milliseconds()
		if want := r.limit + (end-start-1)*r.limit/w; admitted != want {
			t.Errorf("%d per %v over 20 windows: %d admitted, want exactly %d", r.limit, r.window, admitted, want)
		}
	}
}
