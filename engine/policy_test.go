package limit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// DESIGN (Identity): "4. No address at all: one shared fallback bucket at
// max(1, Limit/FallbackDivisor)"; (Decisions) "A policy Cost above capacity
// is a construction error"; (Algorithms) RetryAfter is "the earliest t at
// which the same request would be allowed". New checked the policy Cost
// only against the policy's own capacity. Policy{Limit: 100, Cost: 20} was
// accepted, but its fallback bucket has capacity 10, so every request
// without a client address (every request of a server on a Unix socket,
// which the design calls out as the fallback case) was denied forever, and
// its Retry-After named an instant at which the same request was denied
// again.
func TestStaticCostAboveFallbackCapacityIsNotDeniedForever(t *testing.T) {
	store := storeAt(epochMS)
	l, err := limit.New(store, limit.Policy{Limit: 100, Cost: 20})
	if err != nil {
		t.Skipf("New rejected the policy (fine): %v", err)
	}
	req := limit.Request{Peer: "@"} // a Unix-socket peer: no client address
	for i := 0; i < 3; i++ {
		d := check(l, context.Background(), req).Decision
		if d.KeySource != limit.KeySourceFallback {
			t.Fatalf("key source %s", d.KeySource)
		}
		if d.Allowed {
			return
		}
		t.Logf("attempt %d: denied, Limit %d, Retry-After %v", i, d.Limit, d.RetryAfter)
		store.advance(d.RetryAfter.Milliseconds()) // the client obeys Retry-After
	}
	t.Errorf("New accepted Policy{Limit: 100, Cost: 20}, but no request without a client address can ever " +
		"be admitted (fallback capacity 10 < Cost 20), and each Retry-After was obeyed only to be denied again")
}

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
	const days366 = 366 * 24 * time.Hour
	if _, err := limit.New(storeAt(0), limit.Policy{Window: days366}); err != nil {
		t.Fatalf("Window 366 days: %v", err)
	}
	if _, err := limit.New(storeAt(0), limit.Policy{Window: days366 + time.Millisecond}); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Window") {
		t.Fatalf("Window 366 days + 1 ms: %v, want an error naming Window", err)
	}
}

// ttlRecorder is a store that records the largest TTL and delays its store
// reports.
type ttlRecorder struct {
	*clockStore
	maxTTL, minTTL int64
}

func (s *ttlRecorder) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *ttlRecorder) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	res, err := limittest.Take(ctx, s.clockStore, op)
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

// A TokenBucket of 1 000 per second with Burst 1e13, one request of cost
// 1e13 then one of cost 1, was answered RateLimit-Reset 0, a ResetAfter of
// -2 346 317 h and an X-RateLimit-Reset in the year 2611 (milliseconds past
// ~292 years overflow a time.Duration). Expected: New rejects the policy,
// or every duration and header is in range.
func TestTokenBucketHugeBurstGivesInRangeNumbers(t *testing.T) {
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

// maxRefill is the longest TokenBucket refill New accepts (365 days).
const maxRefill = 365 * 24 * time.Hour

// A TokenBucket whose refill takes centuries (Limit 1000 per 1 s,
// Burst 1e13: 317 years) overflowed time.Duration. New rejects it, naming
// Burst; at the largest accepted refill (maxRefill), a whole-bucket request
// and then one more give in-range Durations and header values.
func TestTokenBucketRefillOfCenturiesIsRefused(t *testing.T) {
	_, err := limit.New(storeAt(0), limit.Policy{Algorithm: limit.TokenBucket, Limit: 1000, Window: time.Second, Burst: 1e13})
	if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Burst") {
		t.Fatalf("New: %v, want ErrInvalidPolicy naming Burst", err)
	}
	// Past a Duration's range (2^49 ms, about 17 800 years) the error still
	// says how long, never a negative Duration.
	_, err = limit.New(storeAt(0), limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Millisecond, Burst: 1 << 49})
	if err == nil || !strings.Contains(err.Error(), "to refill") || strings.Contains(err.Error(), "takes -") || !strings.Contains(err.Error(), "17839 years") {
		t.Errorf("New: %v, want the refill time in years", err)
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

// TokenBucket at 3 per second, 7 per minute and 3 000 per second is
// accepted and admits exactly the rate through a Limiter (here over 20
// windows; TestSteadyRateNoDrift runs Apply over 1 000).
func TestTokenBucketCommonRatesAdmitExactlyTheRate(t *testing.T) {
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

// Every algorithm takes several quotas; Consume does too; a quota list is
// validated field by field.
func TestSeveralQuotasValidation(t *testing.T) {
	for _, tc := range []struct {
		p    limit.Policy
		want string
	}{
		{limit.Policy{Limit: 5, Quotas: []limit.Rate{{Limit: 1, Window: time.Second}}}, "Limit, Window and Burst must be zero"},
		{limit.Policy{Quotas: []limit.Rate{{Limit: 1, Window: time.Second}, {Window: time.Second}}}, "Quotas[1].Limit is 0"},
		{limit.Policy{Quotas: []limit.Rate{{Limit: 1}}}, "Quotas[0].Window is 0"},
		{limit.Policy{Quotas: []limit.Rate{{Limit: 1, Window: time.Second, Burst: 2}}}, "Quotas[0].Burst is only used by TokenBucket"},
		{limit.Policy{Quotas: []limit.Rate{{Limit: 1, Window: time.Second}, {Limit: 1, Window: time.Second}}}, "Quotas[1] repeats Quotas[0]"},
		{limit.Policy{Quotas: make([]limit.Rate, 5)}, "more than MaxQuotas"},
		{limit.Policy{Cost: 3, Quotas: []limit.Rate{{Limit: 5, Window: time.Second}, {Limit: 2, Window: time.Minute}}}, "Cost 3 exceeds the capacity 2 of Quotas[1]"},
		{limit.Policy{Algorithm: limit.TokenBucket, Quotas: []limit.Rate{{Limit: 1, Window: 24 * time.Hour, Burst: 400}}}, "Quotas[0]: limit: invalid policy: TokenBucket Burst 400 at Limit 1"},
		{limit.Policy{Plans: map[string][]limit.Rate{"pro": {{Limit: 1, Window: time.Second}}}}, "Plans is set but Plan is nil"},
		{limit.Policy{Plan: planOfHeader, Plans: map[string][]limit.Rate{"a:b": {{Limit: 1, Window: time.Second}}}}, `Plans key "a:b" contains ':'`},
		{limit.Policy{Plan: planOfHeader, Plans: map[string][]limit.Rate{"pro": nil}}, `Plans["pro"] holds no quota`},
		{limit.Policy{Plan: planOfHeader, Plans: map[string][]limit.Rate{"pro": {{Limit: -1, Window: time.Second}}}}, `Plans["pro"][0].Limit -1 is negative`},
	} {
		_, err := limit.New(limittest.NewStore(nil), tc.p)
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.p, err, tc.want)
		}
	}
	for _, alg := range []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.TokenBucket} {
		store := storeAt(epochMS)
		l := mustNew(t, store, limit.Policy{Algorithm: alg, Quotas: []limit.Rate{{Limit: 3, Window: time.Second}, {Limit: 4, Window: time.Hour}}})
		admitted := 0
		for range 10 {
			store.advance(1000)
			if d, _ := l.Consume(context.Background(), "u"); d.Allowed {
				admitted++
			}
		}
		if admitted != 4 {
			t.Errorf("%v: 3 per second and 4 per hour, one call per second for 10 s: %d admitted, want 4", alg, admitted)
		}
	}
}

func TestNewValidatesPolicyFields(t *testing.T) {
	store := storeAt(0)
	tests := []struct {
		name  string
		p     limit.Policy
		field string // must appear in the error; "" means valid
	}{
		{"zero_value_takes_defaults", limit.Policy{}, ""},
		{"negative_limit", limit.Policy{Limit: -1}, "Limit"},
		{"negative_window", limit.Policy{Window: -time.Second}, "Window"},
		{"window_over_366_days", limit.Policy{Window: 366*24*time.Hour + time.Millisecond}, "Window"},
		{"window_of_366_days", limit.Policy{Limit: 71_000, Window: 366 * 24 * time.Hour}, ""},
		{"window_of_366_days_inexact", limit.Policy{Limit: 72_000, Window: 366 * 24 * time.Hour}, "Limit"},
		{"window_sub_millisecond", limit.Policy{Window: 1500 * time.Microsecond}, "Window"},
		{"negative_cost", limit.Policy{Cost: -2}, "Cost"},
		{"cost_over_limit", limit.Policy{Limit: 3, Cost: 4}, "Cost"},
		{"burst_on_window_algorithm", limit.Policy{Burst: 5}, "Burst"},
		{"token_bucket_3_per_second", limit.Policy{Algorithm: limit.TokenBucket, Limit: 3, Window: time.Second}, ""},
		{"token_bucket_7_per_minute", limit.Policy{Algorithm: limit.TokenBucket, Limit: 7, Window: time.Minute}, ""},
		{"token_bucket_3000_per_second", limit.Policy{Algorithm: limit.TokenBucket, Limit: 3000, Window: time.Second}, ""},
		{"token_bucket_exact_interval", limit.Policy{Algorithm: limit.TokenBucket, Limit: 4, Window: time.Second, Burst: 10}, ""},
		{"token_bucket_refill_at_max", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 366}, ""},
		{"token_bucket_refill_over_max", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 367}, "Burst"},
		{"token_bucket_burst_over_exact_math", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1 << 40, Window: time.Second, Burst: 1 << 41}, "Burst"},
		{"token_bucket_limit_over_exact_math", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1<<50 + 1, Window: time.Second}, "Limit"},
		{"cost_over_burst", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 2, Cost: 3}, "Cost"},
		{"name_with_colon", limit.Policy{Name: "a:b"}, "Name"},
		{"name_blank", limit.Policy{Name: "   "}, "Name"},
		{"name_non_ascii", limit.Policy{Name: "caf\u00e9"}, "Name"},
		{"name_with_quote_is_fine", limit.Policy{Name: `say "hi" \o/`}, ""},
		{"limit_too_large_for_exact_math", limit.Policy{Limit: 1 << 40, Window: 24 * time.Hour}, "Limit"},
		{"unknown_algorithm", limit.Policy{Algorithm: 9}, "Algorithm"},
		{"unknown_disclosure", limit.Policy{Disclosure: 9}, "Disclosure"},
		{"unknown_header_style", limit.Policy{HeaderStyle: 64}, "HeaderStyle"},
		{"fail_local_without_store", limit.Policy{FailureMode: limit.FailLocal}, "FailLocal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := limit.New(store, tt.p)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) || !errors.Is(err, limit.ErrInvalidPolicy) {
				t.Fatalf("New: %v, want an ErrInvalidPolicy naming %s", err, tt.field)
			}
		})
	}
}
