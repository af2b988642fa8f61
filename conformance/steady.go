package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// SteadyRate checks a store at steady TokenBucket rates (stores call it
// from a test of their own): TokenBucket rates whose emission
// interval is not a whole number of milliseconds (3 per second, 7 per
// minute, 3 000 per second) are accepted, their RateLimit-Policy says q= and
// w= as configured, and a client asking as soon as it is allowed (it comes
// back exactly after each RetryAfter, on a fake clock) through a Limiter is
// admitted exactly the burst plus one token per Window/Limit over 1 000
// windows: no drift. Requests cost 2 tokens (1 000 at 3 000 per second):
// a request's share of the window is not a whole number of ms either, and
// the 3 000 windows take about 16 000 store calls (miniredis interprets
// Lua in Go).
func SteadyRate(t *testing.T, newStore NewStoreFunc) {
	for _, r := range []struct {
		limit  int64
		window time.Duration
		cost   int64
		policy string
	}{
		{3, time.Second, 2, `"3p1g";q=3;w=1`},
		{7, time.Minute, 2, `"7p60g";q=7;w=60`},
		{3000, time.Second, 1000, `"3000p1g";q=3000;w=1`},
	} {
		t.Run(fmt.Sprintf("%d-per-%v", r.limit, r.window), func(t *testing.T) {
			clock := limittest.NewClock(epoch)
			l, err := limit.New(newStore(t, clock.Now), limit.Policy{Algorithm: limit.TokenBucket, Limit: r.limit, Window: r.window, Disclosure: limit.DiscloseAlways},
				limit.WithKeyPrefix("conformance"))
			if err != nil {
				t.Fatalf("%d per %v refused: %v", r.limit, r.window, err)
			}
			w := limittest.NewWriter()
			if d := l.Check(context.Background(), limit.Request{Method: "GET", Path: "/", Peer: "192.0.2.13:1"}, w); !d.Allowed || w.Header.Get("Ratelimit-Policy") != r.policy {
				t.Fatalf("%+v: RateLimit-Policy %q, want %q", d, w.Header.Get("Ratelimit-Policy"), r.policy)
			}
			const windows = 1000
			wms := r.window.Milliseconds()
			start := clock.Now().UnixMilli()
			end := start + windows*wms
			var admitted int64
			for clock.Now().UnixMilli() < end {
				d, err := l.ConsumeN(context.Background(), "steady", r.cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
					continue
				}
				if d.RetryAfter <= 0 {
					t.Fatalf("limited with RetryAfter %v", d.RetryAfter)
				}
				clock.Advance(d.RetryAfter)
			}
			// Tokens by the last instant asked (end - 1 ms): the burst, then
			// one per Window/Limit exactly, taken cost at a time.
			if want := (r.limit + (windows*wms-1)*r.limit/wms) / r.cost; admitted != want {
				t.Errorf("%d per %v, cost %d, over %d windows: %d admitted, want exactly %d", r.limit, r.window, r.cost, windows, admitted, want)
			}
		})
	}
}
