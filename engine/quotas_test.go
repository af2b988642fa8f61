package limit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// reportsPolicy is two fixed-window quotas, 2 per 10 s and 3 per 60 s, on
// epoch-aligned windows (epochMS is 10.5 s into a 10 s and a 60 s window),
// disclosing every header style but Triplet.
func reportsPolicy() limit.Policy {
	return limit.Policy{Name: "reports", Algorithm: limit.FixedWindow, AlignWindows: true,
		Quotas:      []limit.Rate{{Limit: 2, Window: 10 * time.Second}, {Limit: 3, Window: time.Minute}},
		Disclosure:  limit.DiscloseAlways,
		HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy,
		CostFunc: func(r limit.Request) int64 {
			if r.Header != nil && len(r.Header.Values("X-Cost")) > 0 {
				return int64(r.Header.Values("X-Cost")[0][0] - '0')
			}
			return 1
		}}
}

func withCost(r limit.Request, cost string) limit.Request {
	r.Header = http.Header{"X-Cost": {cost}}
	return r
}

// Several quotas, all or nothing: a request is admitted only when every
// quota admits it, a limited request charges none of them, RateLimit-Policy
// lists every quota, RateLimit and the Legacy fields report the quota
// closest to exhaustion, and Retry-After is the latest of the limiting
// quotas'.
func TestSeveralQuotasAllOrNothing(t *testing.T) {
	store := storeAt(epochMS)
	l := mustNew(t, store, reportsPolicy())
	ctx := context.Background()
	r := req("192.0.2.1:1", "/v1/reports")
	const policyField = `"reports/2p10f";q=2;w=10, "reports/3p60f";q=3;w=60`
	type want struct {
		allowed   bool
		rateLimit string
		limit     int64
		retryS    string
	}
	steps := []struct {
		advanceMS int64
		r         limit.Request
		want      want
	}{
		{0, r, want{true, `"reports/2p10f";r=1;t=10`, 2, ""}},
		{0, r, want{true, `"reports/2p10f";r=0;t=10`, 2, ""}},
		// The 10 s quota limits; the 60 s one (1 left) is not charged.
		{0, r, want{false, `"reports/2p10f";r=0;t=10`, 2, "10"}},
		// 20.0 s: a new 10 s window; the 60 s quota takes its third.
		{9500, r, want{true, `"reports/3p60f";r=0;t=40`, 3, ""}},
		// Cost 2: both quotas limit (1 and 0 left); the later Retry-After wins.
		{0, withCost(r, "2"), want{false, `"reports/3p60f";r=0;t=40`, 3, "40"}},
		// Only the 60 s quota limits; the 10 s quota's 1 left stays.
		{0, r, want{false, `"reports/3p60f";r=0;t=40`, 3, "40"}},
		// 60.0 s: both fresh.
		{40_000, r, want{true, `"reports/2p10f";r=1;t=10`, 2, ""}},
	}
	for i, st := range steps {
		store.advance(st.advanceMS)
		got := check(l, ctx, st.r)
		d := got.Decision
		if d.Allowed != st.want.allowed || d.Limit != st.want.limit || got.Header.Get("Retry-After") != st.want.retryS {
			t.Fatalf("step %d: %+v, Retry-After %q; want allowed %v, limit %d, Retry-After %q", i, d, got.Header.Get("Retry-After"), st.want.allowed, st.want.limit, st.want.retryS)
		}
		if p, rl := strings.Join(got.Header.Values("Ratelimit-Policy"), ", "), got.Header.Get("Ratelimit"); p != policyField || rl != st.want.rateLimit {
			t.Fatalf("step %d: RateLimit-Policy %q RateLimit %q; want %q and %q", i, p, rl, policyField, st.want.rateLimit)
		}
		if lim := got.Header.Get("X-Ratelimit-Limit"); lim != "2" && lim != "3" || lim[0] != byte('0'+st.want.limit) {
			t.Fatalf("step %d: X-RateLimit-Limit %q, want %d", i, lim, st.want.limit)
		}
	}
	// A cost above the smallest capacity is never admissible: answered by
	// the engine, no store call.
	calls := store.Calls()
	if d := check(l, ctx, withCost(r, "3")).Decision; d.Allowed || !d.OverCapacity || d.Limit != 2 || store.Calls() != calls {
		t.Fatalf("cost 3 with a quota of 2: %+v (store calls %d -> %d)", d, calls, store.Calls())
	}
	// Every quota's record has its own key, all in one hash tag.
	keys := store.Keys()
	if len(keys) != 2 || keys[0][:18] != keys[1][:18] || !strings.Contains(keys[0]+keys[1], ":2p10fa:") || !strings.Contains(keys[0]+keys[1], ":3p60fa:") {
		t.Fatalf("keys %q: want one per quota, one hash tag", keys)
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

// planOfHeader is a Plan function reading X-Plan: "pro" is plan pro,
// "boom" panics, "err" fails, any other value names itself.
func planOfHeader(r limit.Request) (string, error) {
	if r.Header == nil {
		return "", nil
	}
	v := r.Header.Values("X-Plan")
	if len(v) == 0 {
		return "", nil
	}
	switch v[0] {
	case "pro":
		return "pro", nil
	case "boom":
		panic("plan lookup exploded")
	case "err":
		return "", errors.New("plan lookup failed")
	}
	return v[0], nil
}

// Per-plan limits: the plan's quotas decide, in records of their own, the
// headers show the plan's numbers, and a Plan function that fails, panics
// or names an unknown plan falls back to the default plan, counted.
func TestPlans(t *testing.T) {
	store := storeAt(epochMS)
	rec := &limittest.Recorder{}
	l := mustNew(t, store, limit.Policy{Name: "export", Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true,
		Disclosure: limit.DiscloseAlways, Plan: planOfHeader,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 4, Window: time.Minute}}, "team": {{Limit: 3, Window: time.Minute}, {Limit: 9, Window: time.Hour}}}},
		limit.WithObserver(rec))
	ctx := context.Background()
	on := func(plan string) limit.Request {
		r := req("192.0.2.7:1", "/v1/export")
		r.Header = http.Header{"X-Plan": {plan}}
		return r
	}
	count := func(plan string) (admitted int, last response) {
		for range 6 {
			last = check(l, ctx, on(plan))
			if last.Decision.Allowed {
				admitted++
			}
		}
		return admitted, last
	}
	if n, last := count("pro"); n != 4 || last.Decision.Plan != "pro" || last.Header.Get("Ratelimit-Policy") != `"export";q=4;w=60` || last.Decision.Limit != 4 {
		t.Fatalf("pro: %d admitted, last %+v %v", n, last.Decision, last.Header)
	}
	// The same client on the default plan has records of its own.
	if n, last := count(""); n != 2 || last.Decision.Plan != "" || last.Header.Get("Ratelimit-Policy") != `"export";q=2;w=60` {
		t.Fatalf("default plan: %d admitted, last %+v %v", n, last.Decision, last.Header)
	}
	if n, last := count("team"); n != 3 || last.Header.Get("Ratelimit-Policy") != `"export/3p60f";q=3;w=60, "export/9p3600f";q=9;w=3600` {
		t.Fatalf("team: %d admitted, last %+v %v", n, last.Decision, last.Header)
	}
	for _, bad := range []string{"boom", "err", "enterprise"} {
		d := check(l, ctx, on(bad)).Decision
		if d.Allowed || d.Plan != "" || d.Limit != 2 {
			t.Fatalf("plan %q: %+v, want the default plan's (exhausted) decision", bad, d)
		}
	}
	if n := rec.Issues(limit.Issue("plan-fallback")); n != 3 {
		t.Fatalf("%d plan-fallback issues, want 3", n)
	}
	// Consume: Request.Native is the identity.
	c := mustNew(t, store, limit.Policy{Name: "jobs", Limit: 1, Window: time.Minute, Plans: map[string][]limit.Rate{"big": {{Limit: 3, Window: time.Minute}}},
		Plan: func(r limit.Request) (string, error) {
			if id, _ := r.Native.(string); strings.HasPrefix(id, "big-") {
				return "big", nil
			}
			return "", nil
		}})
	for id, want := range map[string]int{"big-1": 3, "small-1": 1} {
		n := 0
		for range 5 {
			if d, _ := c.Consume(ctx, id); d.Allowed {
				n++
			}
		}
		if n != want {
			t.Errorf("Consume %s: %d admitted, want %d", id, n, want)
		}
	}
}

// A known plan costs no allocation on the allowed path.
func TestPlanAllocationFree(t *testing.T) {
	store := storeAt(epochMS)
	l := mustNew(t, store, limit.Policy{Name: "alloc", Limit: 1 << 28, Window: time.Hour,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 1 << 29, Window: time.Hour}, {Limit: 1 << 24, Window: 24 * time.Hour}}},
		Plan:  func(limit.Request) (string, error) { return "pro", nil }})
	r := req("192.0.2.9:1", "/")
	w := limittest.NewWriter()
	ctx := context.Background()
	assertNoAllocs(t, l, func() {
		if d := l.Check(ctx, r, w); !d.Allowed || d.Plan != "pro" {
			t.Fatalf("%+v", d)
		}
	})
}

// Shadow mode: decided and counted as usual, never limiting, no header
// field, a would-be limit reported with its own outcome and logged at most
// once per 10 s; next to an enforcing mount on one request it changes
// nothing of that mount's answer.
func TestShadow(t *testing.T) {
	store := storeAt(epochMS)
	rec := &limittest.Recorder{}
	var logs logBuffer
	called := 0
	shadow := mustNew(t, store, limit.Policy{Name: "try", Limit: 2, Window: time.Minute, Shadow: true, Disclosure: limit.DiscloseAlways,
		OnLimited: func(context.Context, limit.Request, limit.Decision) { called++ }},
		limit.WithObserver(rec), limit.WithLogger(logs.logger()))
	enforcing, err := shadow.With(limit.Policy{Name: "real", Limit: 3, Window: time.Minute, Disclosure: limit.DiscloseAlways})
	if err != nil {
		t.Fatal(err)
	}
	r := req("192.0.2.3:1", "/")
	var outcomes []limit.Outcome
	var last http.Header
	for range 4 {
		h, ds := stack(r, shadow, enforcing)
		outcomes = append(outcomes, ds[0].Outcome, ds[1].Outcome)
		if !ds[0].Allowed {
			t.Fatalf("shadow policy limited: %+v", ds[0])
		}
		last = h
	}
	want := []limit.Outcome{"allowed", "allowed", "allowed", "allowed", "shadow-limited", "allowed", "shadow-limited", "limited"}
	if strings.Join(outcomeStrings(outcomes), " ") != strings.Join(outcomeStrings(want), " ") {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	if got := last.Get("Ratelimit-Policy"); got != `"real";q=3;w=60` || last.Get("Retry-After") == "" {
		t.Fatalf("headers %v: want the enforcing mount's only, and its 429", last)
	}
	if called != 0 {
		t.Fatalf("OnLimited called %d times by a shadow policy", called)
	}
	shadowLimited := 0
	for _, e := range rec.Decisions() {
		if e.Outcome == limit.OutcomeShadowLimited {
			shadowLimited++
		}
	}
	if shadowLimited != 2 || logs.count("shadow policy would have limited") != 1 {
		t.Fatalf("%d shadow-limited events, %d log lines; want 2 and 1:\n%s", shadowLimited, logs.count("shadow policy would have limited"), logs.String())
	}
	// Consume too.
	if d, _ := shadow.Consume(context.Background(), "x"); !d.Allowed {
		t.Fatal(d)
	}
	shadow.Consume(context.Background(), "x")
	if d, _ := shadow.Consume(context.Background(), "x"); !d.Allowed || d.Outcome != limit.OutcomeShadowLimited {
		t.Fatalf("Consume over the limit in shadow mode: %+v", d)
	}
}

func outcomeStrings(os []limit.Outcome) []string {
	s := make([]string, len(os))
	for i, o := range os {
		s[i] = string(o)
	}
	return s
}

// The claims and the fallback bucket handle several quotas: a second
// unnamed Limiter with the same quotas on one Store is refused (one with
// other quotas is not), and requests without an identity draw on every
// quota tightened by the fallback divisor, under the quotas' own names.
func TestSeveralQuotasClaimsAndFallback(t *testing.T) {
	store := claiming(storeAt(epochMS))
	p := limit.Policy{Algorithm: limit.FixedWindow, AlignWindows: true, Disclosure: limit.DiscloseAlways,
		Quotas: []limit.Rate{{Limit: 20, Window: 10 * time.Second}, {Limit: 50, Window: time.Minute}}}
	l := mustNew(t, store, p)
	if _, err := limit.New(store, p); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "20p10fa+50p60fa") {
		t.Fatalf("second unnamed Limiter with the same quotas: %v", err)
	}
	other := p
	other.Quotas = []limit.Rate{{Limit: 20, Window: 10 * time.Second}}
	mustNew(t, store, other)
	r := req("", "/")
	got := check(l, context.Background(), r)
	if d := got.Decision; d.KeySource != limit.KeySourceFallback || d.Limit != 2 || d.Remaining != 1 {
		t.Fatalf("fallback: %+v", d)
	}
	if p := got.Header.Get("Ratelimit-Policy"); p != `"20p10f";q=2;w=10, "50p60f";q=5;w=60` {
		t.Fatalf("fallback RateLimit-Policy %q", p)
	}
}
