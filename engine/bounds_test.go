package limit_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quotagate/quotagate/engine/limitstore"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// Validation and arithmetic: every policy New accepts gives in-range
// numbers. The property is checked on the boundary of the accepted range:
// for each algorithm and a spread of windows, the largest Limit (and for a
// TokenBucket the largest Burst) New accepts is found by bisection, the next
// value up must be refused with an error naming the field, and the boundary
// policy (and random ones inside the range) is then driven through Check
// with random costs (up to the capacity and beyond) and clock steps. Every
// Decision's delays must lie in [0, the policy's own maximum], every header
// integer must have at most 15 digits (RFC 9651), Retry-After and
// X-RateLimit-Reset must follow from the delays, and every state the store
// writes must carry a TTL in (0, the policy's maximum].
func TestAcceptedPoliciesGiveInRangeNumbers(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 4))
	for _, p := range limittest.BoundaryPolicies(t, rng) {
		t.Run(fmt.Sprintf("%v/%v/%d/%d/aligned=%v", p.Algorithm, p.Window, p.Limit, p.Burst, p.AlignWindows), func(t *testing.T) {
			drive(t, p, rng)
		})
	}
	// The Window's own boundary.
	if _, err := limit.New(storeAt(0), limit.Policy{Window: 24 * time.Hour}); err != nil {
		t.Fatalf("Window 24h: %v", err)
	}
	if _, err := limit.New(storeAt(0), limit.Policy{Window: 24*time.Hour + time.Millisecond}); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Window") {
		t.Fatalf("Window 24h+1ms: %v, want an error naming Window", err)
	}
}

// ttlRecorder is a store that records the largest TTL and delays its store
// reports.
type ttlRecorder struct {
	*clockStore
	maxTTL, minTTL int64
}

func (s *ttlRecorder) Take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	res, err := s.clockStore.Take(ctx, op)
	if res.Allowed {
		for _, q := range res.Quotas[:res.N] {
			s.maxTTL, s.minTTL = max(s.maxTTL, q.TTLMS), min(s.minTTL, q.TTLMS)
		}
	}
	return res, err
}

// drive runs random traffic through a Limiter of p and checks every number
// it reports.
func drive(t *testing.T, p limit.Policy, rng *rand.Rand) {
	p.Disclosure, p.HeaderStyle = limit.DiscloseAlways, limit.HeadersIETF|limit.HeadersTriplet|limit.HeadersLegacy
	var cost int64
	p.CostFunc = func(limit.Request) int64 { return cost }
	store := &ttlRecorder{clockStore: storeAt(1_767_225_600_000 + rng.Int64N(1e9)), minTTL: 1 << 62}
	l := mustNew(t, store, p)
	w := p.Window.Milliseconds()
	capacity, bound := p.Limit, limittest.MaxDelayMS(p)
	if p.Algorithm == limit.TokenBucket {
		capacity = p.Burst
	}
	for step := 0; step < 300; step++ {
		switch rng.IntN(6) {
		case 0:
		case 1:
			store.advance(1)
		case 2:
			store.advance(rng.Int64N(w) + 1)
		case 3:
			store.advance(w)
		default:
			store.advance(rng.Int64N(3*w + 1))
		}
		switch rng.IntN(5) {
		case 0:
			cost = capacity
		case 1:
			cost = capacity + 1 + rng.Int64N(1<<40) // never admissible
		case 2:
			cost = 1 + rng.Int64N(capacity)
		default:
			cost = 1
		}
		resp := check(l, context.Background(), req("192.0.2.77:1", "/x"))
		d := resp.Decision
		if d.ResetAfter < 0 || d.RetryAfter < 0 || d.ResetAfter.Milliseconds() > bound || d.RetryAfter.Milliseconds() > bound {
			t.Fatalf("step %d, cost %d: ResetAfter %v, RetryAfter %v, want both in [0, %d ms]", step, cost, d.ResetAfter, d.RetryAfter, bound)
		}
		checkHeaderIntegers(t, resp.Header, bound, store.clock.Now())
	}
	if store.maxTTL > bound || store.minTTL <= 0 {
		t.Fatalf("TTLs in [%d, %d] ms, want them in (0, %d]", store.minTTL, store.maxTTL, bound)
	}
}

var negative = regexp.MustCompile(`(^|[=;,\s])-[0-9]`)

// checkHeaderIntegers checks every integer the limiter wrote: at most 15
// digits and not negative; delta seconds within the bound (rounded up);
// X-RateLimit-Reset within the bound of now.
func checkHeaderIntegers(t *testing.T, h http.Header, boundMS int64, now time.Time) {
	t.Helper()
	boundS := (boundMS + 999) / 1000
	for name, vs := range h {
		for _, v := range vs {
			for _, tok := range strings.FieldsFunc(v, func(r rune) bool { return r < '0' || r > '9' }) {
				if len(tok) > 15 {
					t.Fatalf("%s: %q carries an integer of %d digits", name, v, len(tok))
				}
			}
			if negative.MatchString(v) {
				t.Fatalf("%s: %q carries a negative number", name, v)
			}
		}
	}
	delta := func(name, v string) int64 {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", name, v, err)
		}
		return n
	}
	if v := h.Get("Retry-After"); v != "" && (delta("Retry-After", v) < 1 || delta("Retry-After", v) > max(boundS, 1)) {
		t.Fatalf("Retry-After %s, want 1..%d", v, max(boundS, 1))
	}
	if v := h.Get("Ratelimit-Reset"); v != "" && delta("RateLimit-Reset", v) > boundS {
		t.Fatalf("RateLimit-Reset %s, want at most %d", v, boundS)
	}
	if v := h.Get("X-Ratelimit-Reset"); v != "" {
		if at := delta("X-RateLimit-Reset", v); at < now.Unix() || at > now.Unix()+boundS+1 {
			t.Fatalf("X-RateLimit-Reset %s, want within [%d, %d]", v, now.Unix(), now.Unix()+boundS+1)
		}
	}
}

// Case C-07 (issue 16): a TokenBucket of 1 000 per second with Burst 1e13,
// one request of cost 1e13 then one of cost 1, answered RateLimit-Reset 0,
// a ResetAfter of -2 346 317 h and an X-RateLimit-Reset in the year 2611
// (milliseconds past ~292 years overflow a time.Duration). Expected: New
// rejects the policy, or every duration and header is in range.
func TestRegressionC07DurationOverflow(t *testing.T) {
	p := limit.Policy{Algorithm: limit.TokenBucket, Limit: 1000, Window: time.Second, Burst: 1e13,
		Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}
	var cost int64
	p.CostFunc = func(limit.Request) int64 { return cost }
	store := storeAt(1_767_225_600_000)
	l, err := limit.New(store, p)
	if err != nil {
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Burst") {
			t.Fatalf("New: %v, want a refusal naming Burst", err)
		}
		return
	}
	for _, cost = range []int64{1e13, 1} {
		resp := check(l, context.Background(), req("192.0.2.7:1", "/x"))
		d := resp.Decision
		if d.ResetAfter < 0 || d.RetryAfter < 0 || d.ResetAt.Year() > 2100 {
			t.Fatalf("cost %d: %+v, want every duration in range", cost, d)
		}
		checkHeaderIntegers(t, resp.Header, 400*24*3600*1000, store.clock.Now())
		if v := resp.Header.Get("Ratelimit-Reset"); v == "0" && cost == 1 {
			t.Fatalf("cost 1 on an emptied bucket: RateLimit-Reset 0")
		}
	}
}
