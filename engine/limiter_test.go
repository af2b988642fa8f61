package limit_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

func checkPeer(l *limit.Limiter, peer string) response {
	return check(l, context.Background(), limit.Request{Peer: peer, Path: "/x", Method: "GET"})
}

// A client that keeps retrying while denied is admitted again exactly when
// Retry-After said, in every algorithm, and not one millisecond earlier.
func TestRetryingWhileDeniedIsAdmittedExactlyAtRetryAfter(t *testing.T) {
	for _, p := range []limit.Policy{
		{Algorithm: limit.FixedWindow, Limit: 3, Window: 10 * time.Second},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: 10 * time.Second},
		{Algorithm: limit.TokenBucket, Limit: 2, Window: 10 * time.Second, Burst: 3},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			store := storeAt(1_700_000_000_123)
			l := limittest.MustNew(store, p)
			for i := 0; i < 3; i++ {
				if r := checkPeer(l, "192.0.2.7:1000"); r.Denied() {
					t.Fatalf("request %d denied", i)
				}
			}
			r := checkPeer(l, "192.0.2.7:1000")
			if !r.Denied() {
				t.Fatal("4th request admitted")
			}
			wait := r.Decision.RetryAfter.Milliseconds()
			// retry every 100 ms while denied: nothing is consumed, and the
			// promised instant does not move
			for waited := int64(0); waited+100 < wait; waited += 100 {
				store.advance(100)
				r2 := checkPeer(l, "192.0.2.7:1000")
				if !r2.Denied() {
					t.Fatalf("admitted after %d ms, Retry-After promised %d ms", waited+100, wait)
				}
				if got := r2.Decision.RetryAfter.Milliseconds(); got != wait-waited-100 {
					t.Fatalf("after %d ms the delay is %d ms, want %d", waited+100, got, wait-waited-100)
				}
			}
			// jump to exactly the promised instant (from the first denial)
			store.set(1_700_000_000_123 + wait)
			if r := checkPeer(l, "192.0.2.7:1000"); r.Denied() {
				t.Fatalf("denied at the promised instant (+%d ms)", wait)
			}
		})
	}
}

func TestTokenBucketBurstAndRefill(t *testing.T) {
	store := storeAt(5_000_000)
	// 1 token per second, burst 5
	l := limittest.MustNew(store, limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5})
	for i := 0; i < 5; i++ {
		r := checkPeer(l, "203.0.113.9:1")
		if r.Denied() || r.Decision.Remaining != int64(4-i) {
			t.Fatalf("burst request %d: denied=%v remaining=%d", i, r.Denied(), r.Decision.Remaining)
		}
	}
	r := checkPeer(l, "203.0.113.9:1")
	if !r.Denied() || r.Decision.RetryAfter != time.Second {
		t.Fatalf("6th: denied=%v retry=%v, want denied for 1s", r.Denied(), r.Decision.RetryAfter)
	}
	store.advance(999)
	if r := checkPeer(l, "203.0.113.9:1"); !r.Denied() {
		t.Fatal("admitted 1 ms before a token refilled")
	}
	store.advance(1)
	if r := checkPeer(l, "203.0.113.9:1"); r.Denied() {
		t.Fatal("denied when a token had refilled")
	}
	// a long idle period refills to Burst, not beyond
	store.advance(60_000)
	if r := checkPeer(l, "203.0.113.9:1"); r.Decision.Remaining != 4 {
		t.Fatalf("after idling, remaining %d, want 4 (burst 5 minus this one)", r.Decision.Remaining)
	}
}

func TestCostAboveRemainingIsDeniedWithoutConsuming(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			store := storeAt(0)
			cost := int64(1)
			p := limit.Policy{Algorithm: alg, Limit: 5, Window: 5 * time.Second, AlignWindows: true,
				CostFunc: func(limit.Request) int64 { return cost }}
			l := limittest.MustNew(store, p)
			for i := 0; i < 3; i++ {
				checkPeer(l, "192.0.2.1:9")
			}
			cost = 3 // 2 remain
			if r := checkPeer(l, "192.0.2.1:9"); !r.Denied() || r.Decision.Remaining != 2 {
				t.Fatalf("cost 3 with 2 remaining: denied=%v remaining=%d", r.Denied(), r.Decision.Remaining)
			}
			cost = 1_000_000 // far above the capacity: never admissible, answered without the store
			calls := store.Calls()
			if r := checkPeer(l, "192.0.2.1:9"); !r.Denied() || !r.Decision.OverCapacity || r.Decision.RetryAfter != 0 || store.Calls() != calls {
				t.Fatalf("huge cost: denied=%v over=%v retry=%v store calls %d", r.Denied(), r.Decision.OverCapacity, r.Decision.RetryAfter, store.Calls()-calls)
			}
			cost = 2 // the denied requests consumed nothing
			if r := checkPeer(l, "192.0.2.1:9"); r.Denied() || r.Decision.Remaining != 0 {
				t.Fatalf("cost 2 with 2 remaining: denied=%v remaining=%d", r.Denied(), r.Decision.Remaining)
			}
		})
	}
}

func TestConsume(t *testing.T) {
	store := storeAt(0)
	l := limittest.MustNew(store, limit.Policy{Name: "jobs", Limit: 2, Algorithm: limit.FixedWindow})
	for i := 0; i < 2; i++ {
		if d, err := l.Consume(context.Background(), "tenant-a"); err != nil || !d.Allowed || d.Bucket != "jobs" {
			t.Fatalf("consume %d: %+v %v", i, d, err)
		}
	}
	if d, _ := l.Consume(context.Background(), "tenant-a"); d.Allowed || d.Outcome != limit.OutcomeLimited {
		t.Fatalf("third consume: %+v", d)
	}
	if d, _ := l.ConsumeN(context.Background(), "tenant-b", 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("ConsumeN(2) for another tenant: %+v", d)
	}
}

// A local store given to a policy that does not fail local would be
// ignored (4 of Limit 2 admitted with the store down): New refuses it,
// naming both settings.
func TestNewRefusesALocalStoreWithoutFailLocal(t *testing.T) {
	local := storeAt(0)
	_, err := limit.New(errStore, limit.Policy{Limit: 2}, limit.WithLocalStore(local))
	if !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithLocalStore") || !strings.Contains(err.Error(), "FailLocal") {
		t.Fatalf("New: %v; want ErrInvalidOption naming WithLocalStore and FailLocal", err)
	}
	l := mustNew(t, errStore, limit.Policy{Limit: 2, FailureMode: limit.FailLocal}, limit.WithLocalStore(local))
	admitted := 0
	for range 4 {
		if d, _ := l.Consume(context.Background(), "c"); d.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("FailLocal with the store down admitted %d of 4, want 2", admitted)
	}
}

// With(p) is New(store, p, options): a policy derived from a FailLocal
// parent with a local store, that does not say FailLocal itself, is refused
// as New refuses it, rather than failing open (5 of Limit 2 admitted) while
// the store is down; one that says FailLocal limits locally.
func TestWithMakesTheChecksOfNew(t *testing.T) {
	local := storeAt(0)
	parent := mustNew(t, errStore, limit.Policy{FailureMode: limit.FailLocal}, limit.WithLocalStore(local))
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailClosed} {
		_, err := parent.With(limit.Policy{Limit: 2, Window: time.Minute, FailureMode: mode})
		if !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithLocalStore") || !strings.Contains(err.Error(), "FailLocal") {
			t.Fatalf("With(%v) under WithLocalStore: %v; want ErrInvalidOption naming WithLocalStore and FailLocal", mode, err)
		}
	}
	if _, err := parent.With(limit.Policy{Limit: -1, FailureMode: limit.FailLocal}); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("With(Limit -1): %v; want ErrInvalidPolicy", err)
	}
	login, err := parent.With(limit.Policy{Name: "login", Limit: 2, Window: time.Minute, FailureMode: limit.FailLocal})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 5 {
		if d, _ := login.Consume(context.Background(), "c"); d.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("derived FailLocal policy with the store down admitted %d of 5, want 2", admitted)
	}
	plain := mustNew(t, errStore, limit.Policy{})
	if _, err := plain.With(limit.Policy{FailureMode: limit.FailLocal}); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "WithLocalStore") {
		t.Fatalf("With(FailLocal) with no local store: %v; want ErrInvalidPolicy naming WithLocalStore", err)
	}
}

// A cost above the quota's capacity (ConsumeN 6 on a FixedWindow 5 per
// minute; a cost above a token bucket's Burst; above the fallback bucket's
// reduced capacity) got 429 with a Retry-After (61 s, or 1 s on a full token
// bucket) that promised success: a client obeying it retried for ever. Now
// it is answered without the store: limited, OverCapacity, RetryAfter 0 and
// RetryAfterSeconds 0, nothing taken.
func TestNeverAdmissibleCostIsLimitedWithoutTheStore(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		store := storeAt(1_767_225_600_000)
		l := limittest.MustNew(store, limit.Policy{Algorithm: alg, Limit: 5, Window: time.Minute})
		ctx := context.Background()
		for _, n := range []int64{6, 1 << 62} {
			d, err := l.ConsumeN(ctx, "u", n)
			if err != nil || d.Allowed || !d.OverCapacity || d.Outcome != limit.OutcomeLimited || d.RetryAfter != 0 || limit.RetryAfterSeconds(d) != 0 {
				t.Fatalf("%v: ConsumeN(%d) = %+v, %v; want limited, OverCapacity, no retry", alg, n, d, err)
			}
		}
		if store.Calls() != 0 {
			t.Fatalf("%v: the store was asked %d times about a never-admissible cost", alg, store.Calls())
		}
		// Nothing was taken: the whole quota is there.
		if d, _ := l.ConsumeN(ctx, "u", 5); !d.Allowed || d.OverCapacity {
			t.Fatalf("%v: ConsumeN(5) after the refusals: %+v, want allowed", alg, d)
		}
		// An admissible cost that does not fit now is an ordinary limit.
		if d, _ := l.ConsumeN(ctx, "u", 1); d.Allowed || d.OverCapacity || d.RetryAfter <= 0 {
			t.Fatalf("%v: ConsumeN(1) on a spent quota: %+v, want limited with a Retry-After", alg, d)
		}
	}
	// Above a token bucket's Burst (but within Limit), and above the
	// fallback bucket's capacity (Limit/10) for a blank identity.
	tb := limittest.MustNew(storeAt(0), limit.Policy{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 3})
	if d, _ := tb.ConsumeN(context.Background(), "u", 4); !d.OverCapacity {
		t.Fatalf("cost 4 on Burst 3: %+v, want OverCapacity", d)
	}
	fw := limittest.MustNew(storeAt(0), limit.Policy{Algorithm: limit.FixedWindow, Limit: 100})
	if d, _ := fw.ConsumeN(context.Background(), " ", 11); !d.OverCapacity || d.Limit != 10 {
		t.Fatalf("cost 11 in the fallback bucket of 10: %+v, want OverCapacity", d)
	}
	if d, _ := fw.ConsumeN(context.Background(), "u", 11); d.OverCapacity || !d.Allowed {
		t.Fatalf("cost 11 with an identity (capacity 100): %+v, want allowed", d)
	}
}

func TestSlidingOverCapacityWithOnlyThePreviousWindowRetriesAtReset(t *testing.T) {
	s := storeAt(1_767_225_600_000)
	l := limittest.MustNew(s, limit.Policy{Limit: 5, Window: 5 * time.Second, AlignWindows: true})
	ctx := context.Background()
	l.ConsumeN(ctx, "u", 2)
	s.advance(5000) // the next window: only prev holds requests
	d, _ := l.ConsumeN(ctx, "u", 6)
	if d.RetryAfter != d.ResetAfter {
		t.Errorf("sliding, prev only: cost above capacity: RetryAfter %v, ResetAfter (whole quota back) %v", d.RetryAfter, d.ResetAfter)
	}
}

func TestConsumeIdentitiesKeepTheirOwnDomain(t *testing.T) {
	l := limittest.MustNew(storeAt(1_767_225_600_000), limit.Policy{Limit: 2})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		l.Consume(ctx, "192.0.2.1")
		l.Consume(ctx, "192.0.2.1:1")
	}
	r := check(l, ctx, limit.Request{Peer: "192.0.2.1:1"})
	if r.Denied() {
		t.Errorf("Consume identity spelling an address drained the address's allowance")
	}
	// KeyFunc and Consume identities are one domain (same bucket by design);
	// a blank-after-trim identity: KeyFunc treats "  " as blank.
	d, _ := l.Consume(ctx, "  ")
	t.Logf("Consume(\"  \"): KeySource %v Limit %d", d.KeySource, d.Limit)
	if d.KeySource != limit.KeySourceFallback {
		t.Errorf("Consume(%q): KeySource %v, Limit %d; ConsumeN doc: a blank identity draws on the shared fallback bucket (KeyFunc's blank = empty after TrimSpace)", "  ", d.KeySource, d.Limit)
	}
}

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
	if len(keys) != 2 || keys[0][:18] != keys[1][:18] || !strings.Contains(keys[0]+keys[1], ":p10fa:") || !strings.Contains(keys[0]+keys[1], ":p60fa:") {
		t.Fatalf("keys %q: want one per quota, one hash tag", keys)
	}
}

// Shadow mode: decided and counted as usual, never limiting, no header
// field, a would-be limit reported with its own outcome and logged at most
// once per 10 s; next to an enforcing mount on one request it changes
// nothing of that mount's answer.
func TestShadow(t *testing.T) {
	store := storeAt(epochMS)
	rec := &limittest.Recorder{}
	var logs limittest.Log
	called := 0
	shadow := mustNew(t, store, limit.Policy{Name: "try", Limit: 2, Window: time.Minute, Shadow: true, Disclosure: limit.DiscloseAlways,
		OnLimited: func(context.Context, limit.Request, limit.Decision) { called++ }},
		limit.WithObserver(rec), limit.WithLogger(logs.Logger()))
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
	if shadowLimited != 2 || logs.Count("shadow policy would have limited") != 1 {
		t.Fatalf("%d shadow-limited events, %d log lines; want 2 and 1:\n%s", shadowLimited, logs.Count("shadow policy would have limited"), logs.String())
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

// benchLimiter returns a limiter over a reference store at a fixed clock
// reading whose quota is far above any b.N unless p sets a Limit.
func benchLimiter(tb testing.TB, p limit.Policy) (*limit.Limiter, *limittest.Store) {
	now := time.UnixMilli(epochMS)
	store := limittest.NewStore(func() time.Time { return now })
	if p.Limit == 0 && p.Quotas == nil {
		p.Limit = 1 << 28
		p.Window = time.Hour
	}
	return mustNew(tb, store, p), store
}

// benchQuotas are four quotas far above any b.N.
var benchQuotas = []limit.Rate{{Limit: 1 << 28, Window: time.Hour}, {Limit: 1 << 29, Window: 30 * time.Minute}, {Limit: 1 << 27, Window: 2 * time.Hour}, {Limit: 1 << 24, Window: 24 * time.Hour}}

func BenchmarkCheck(b *testing.B) {
	cases := []struct {
		name string
		p    limit.Policy
		deny bool
	}{
		{"allowed/default-disclosure", limit.Policy{}, false},
		{"allowed/always-ietf", limit.Policy{Disclosure: limit.DiscloseAlways}, false},
		{"allowed/always-all-styles", limit.Policy{Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}, false},
		{"allowed/skip-path-miss", limit.Policy{SkipPaths: []string{"/health", "/metrics"}}, false},
		{"skipped/skip-path-hit", limit.Policy{SkipPaths: []string{"/v1/notes/1"}}, false},
		{"denied/default-disclosure", limit.Policy{Limit: 1}, true},
		{"denied/on-limit-all-styles", limit.Policy{Limit: 1, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}, true},
		{"allowed/4-quotas", limit.Policy{Quotas: benchQuotas}, false},
		{"allowed/4-quotas-always-ietf", limit.Policy{Quotas: benchQuotas, Disclosure: limit.DiscloseAlways}, false},
		{"allowed/plan", limit.Policy{Limit: 1 << 28, Window: time.Hour, Plans: map[string][]limit.Rate{"pro": benchQuotas[:1]},
			Plan: func(limit.Request) (string, error) { return "pro", nil }}, false},
		{"allowed/shadow", limit.Policy{Shadow: true}, false},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			l, _ := benchLimiter(b, tc.p)
			r := req("192.0.2.1:4711", "/v1/notes/1")
			ctx := context.Background()
			w := limittest.Discard // the engine alone, as the adapters' benchmarks add the writing
			l.Check(ctx, r, w)     // create the key (and exhaust a quota of 1)
			b.ReportAllocs()
			for b.Loop() {
				if d := l.Check(ctx, r, w); d.Allowed == tc.deny {
					b.Fatalf("Allowed = %v", d.Allowed)
				}
			}
		})
	}
	b.Run("allowed/default-disclosure/parallel-1024-peers", func(b *testing.B) {
		l, _ := benchLimiter(b, limit.Policy{})
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1)
			ctx := context.Background()
			w := limittest.Discard
			for pb.Next() {
				i++
				peer := peers[i&1023]
				if !l.Check(ctx, limit.Request{Method: "GET", Path: "/v1/notes/1", Peer: peer}, w).Allowed {
					b.Fatal("limited")
				}
			}
		})
	})
}

var peers = func() []string {
	p := make([]string, 1024)
	for i := range p {
		p[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":5000"
	}
	return p
}()

// The allowed path at the default disclosure allocates nothing once the
// key exists. Not parallel: allocation counts are process-wide.
func TestCheckAllowedDefaultDisclosureDoesNotAllocate(t *testing.T) {
	l, _ := benchLimiter(t, limit.Policy{})
	r := req("192.0.2.1:4711", "/v1/notes/1")
	ctx := context.Background()
	w := limittest.NewWriter()
	assertNoAllocs(t, l, func() {
		if d := l.Check(ctx, r, w); !d.Allowed || len(w.Header) != 0 || w.Sends != 0 {
			t.Fatal("limited, or fields at the default disclosure")
		}
	})
}

// Two services on one shared store (Info.Shared, as Redis says) with the
// same numbers and the default key prefix would draw on one allowance per
// client: New refuses the default prefix there, naming WithKeyPrefix; with
// a prefix each service has its own allowance, and WithKeyPrefix of the
// default prefix shares it on purpose. A guarded store keeps the check.
func TestSharedStoreNeedsAKeyPrefix(t *testing.T) {
	ctx := context.Background()
	shared := limittest.NewStore(limittest.NewClock(time.UnixMilli(1_767_225_600_000)).Now)
	shared.Info = limitstore.Info{Name: "net", Shared: true}
	guarded, err := guard.New(shared)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []limitstore.Store{shared, guarded} {
		_, err := limit.New(s, limit.Policy{Limit: 1})
		if !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithKeyPrefix") {
			t.Fatalf("New on a shared %T with the default prefix: %v; want ErrInvalidOption naming WithKeyPrefix", s, err)
		}
	}
	orders := mustNew(t, shared, limit.Policy{Limit: 1}, limit.WithKeyPrefix("orders"))
	users := mustNew(t, shared, limit.Policy{Limit: 1}, limit.WithKeyPrefix("users"))
	for _, l := range []*limit.Limiter{orders, users} {
		if d, _ := l.Consume(ctx, "c"); !d.Allowed {
			t.Fatalf("first call of client c in its own namespace: %+v; want allowed", d)
		}
	}
	a := mustNew(t, shared, limit.Policy{Name: "api", Limit: 1}, limit.WithKeyPrefix(limit.DefaultKeyPrefix))
	b := mustNew(t, shared, limit.Policy{Name: "api", Limit: 1}, limit.WithKeyPrefix(limit.DefaultKeyPrefix))
	if d, _ := a.Consume(ctx, "c"); !d.Allowed {
		t.Fatalf("first call in the default namespace: %+v", d)
	}
	if d, _ := b.Consume(ctx, "c"); d.Allowed {
		t.Fatalf("second service sharing the default namespace on purpose: %+v; want limited (one allowance)", d)
	}
	if _, err := limit.New(limittest.NewStore(nil), limit.Policy{Limit: 1}); err != nil {
		t.Fatalf("New on a store that is not shared, default prefix: %v", err)
	}
}

// A Decision holds nothing of the decisions before it, whichever entry
// point reuses its memory: a request that no wait admits, then a limited
// one, then allowed ones, through Check (its pooled response) and
// CheckHTTP, each compared with the decision of ConsumeN (a fresh Decision
// every call) on a limiter of its own that has seen the same sequence.
func TestDecisionHoldsNothingOfTheOneBefore(t *testing.T) {
	// AlignWindows: the same windows for a client address and ConsumeN's
	// identity, whose keys (and so phases) differ.
	p := limit.Policy{Limit: 2, Window: time.Minute, AlignWindows: true, Disclosure: limit.DiscloseAlways,
		CostFunc: func(r limit.Request) int64 {
			n, _ := strconv.ParseInt(strings.Join(r.Header.Values("X-Cost"), ""), 10, 64)
			return n
		}}
	steps := []struct {
		peer string
		cost int64
	}{{"192.0.2.1", 3}, {"192.0.2.1", 2}, {"192.0.2.1", 1}, {"192.0.2.2", 1}, {"192.0.2.1", 3}, {"192.0.2.2", 1}}
	check, checkHTTP, ref := mustNew(t, storeAt(epochMS), p), mustNew(t, storeAt(epochMS), p), mustNew(t, storeAt(epochMS), p)
	for i, s := range steps {
		h := http.Header{"X-Cost": {strconv.FormatInt(s.cost, 10)}}
		hr, _ := http.NewRequest("GET", "/x", nil)
		hr.Header, hr.RemoteAddr = h, s.peer+":4711"
		got := check.Check(context.Background(), limit.Request{Method: "GET", Path: "/x", Peer: hr.RemoteAddr, Header: h}, limittest.NewWriter())
		gotHTTP := checkHTTP.CheckHTTP(limittest.NewSink(), hr, limit.Request{})
		want, err := ref.ConsumeN(context.Background(), s.peer, s.cost)
		if err != nil {
			t.Fatal(err)
		}
		for name, d := range map[string]limit.Decision{"Check": got, "CheckHTTP": gotHTTP} {
			if d.Allowed != want.Allowed || d.OverCapacity != want.OverCapacity || d.Remaining != want.Remaining ||
				d.RetryAfter != want.RetryAfter || d.ResetAfter != want.ResetAfter || !d.ResetAt.Equal(want.ResetAt) ||
				d.Cost != want.Cost || d.Outcome != want.Outcome || d.StoreFailed != want.StoreFailed ||
				d.Limit != want.Limit || d.Waited != want.Waited || d.Blocked != want.Blocked {
				t.Fatalf("step %d, %s: %+v, want %+v", i, name, d, want)
			}
		}
	}
}
