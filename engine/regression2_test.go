package limit_test

// Regression tests from a second attempt to break the engine: each failed
// (or guarded a fix of the first attempt) before its fix.

import (
	"context"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// Case C-08 (issue 16): a cost above the quota's capacity (ConsumeN 6 on a
// FixedWindow 5 per minute; a cost above a token bucket's Burst; above the
// fallback bucket's reduced capacity) got 429 with a Retry-After (61 s, or
// 1 s on a full token bucket) that promised success: a client obeying it
// retried for ever. Now it is answered without the store: limited,
// OverCapacity, RetryAfter 0 and RetryAfterSeconds 0, nothing taken.
func TestRegressionC08NeverAdmissibleCost(t *testing.T) {
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

// Over HTTP the answer is 429 with its own problem type and neither
// Retry-After nor a RateLimit field (which would carry a t promising
// success), at every disclosure level; OnLimited still runs.
func TestRegressionC08NeverAdmissibleCostOverHTTP(t *testing.T) {
	for _, d := range []limit.Disclosure{limit.DiscloseNone, limit.DiscloseRetryAfter, limit.DiscloseOnLimit, limit.DiscloseAlways} {
		limited := 0
		l := limittest.MustNew(storeAt(0), limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Disclosure: d,
			HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy,
			CostFunc:    func(limit.Request) int64 { return 6 },
			OnLimited:   func(_ context.Context, _ limit.Request, d limit.Decision) { limited++ }})
		resp := check(l, context.Background(), req("192.0.2.1:1", "/upload"))
		if resp.Status != 429 || !resp.Decision.OverCapacity || limited != 1 {
			t.Fatalf("disclosure %d: status %d, %+v, OnLimited %d", d, resp.Status, resp.Decision, limited)
		}
		for name := range resp.Header {
			switch name {
			case "Cache-Control", "Content-Type":
			default:
				t.Fatalf("disclosure %d: field %s = %q: want no Retry-After and no RateLimit field", d, name, resp.Header[name])
			}
		}
		if d != limit.DiscloseNone && !strings.Contains(string(resp.Body), `"type":"https://github.com/quotagate/quotagate/blob/main/docs/response-contract.md#cost-exceeds-quota"`) {
			t.Fatalf("disclosure %d: body %s, want the cost-exceeds-quota problem type", d, resp.Body)
		}
	}
}

func TestRegression2FailureResponses(t *testing.T) {
	ctx := context.Background()
	req := limit.Request{Peer: "192.0.2.1:1"}
	// FailLocal denial from the local store.
	l := limittest.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailLocal, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}, limit.WithLocalStore(storeAt(1_767_225_600_000)))
	checkHTTP(l, req)
	w := checkHTTP(l, req)
	t.Logf("FailLocal denial: %d %v", w.Code, w.Header())
	if w.Code != 429 || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Retry-After") == "" || w.Header().Get("Ratelimit") == "" {
		t.Errorf("FailLocal denial: %d %v", w.Code, w.Header())
	}
	// FailClosed: 503, Retry-After 1, no RateLimit fields even at Always.
	l = limittest.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailClosed, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy | limit.HeadersTriplet})
	w = checkHTTP(l, req)
	t.Logf("FailClosed: %d %v %s", w.Code, w.Header(), w.Body)
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Ratelimit") != "" || w.Header().Get("X-Ratelimit-Reset") != "" {
		t.Errorf("FailClosed: %d %v", w.Code, w.Header())
	}
	// FailOpen allowed: no RateLimit numbers at Always.
	l = limittest.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailOpen, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy | limit.HeadersTriplet})
	r := check(l, ctx, req)
	t.Logf("FailOpen fields: %v", r.Fields())
	if r.Denied() || len(r.Fields()) > 1 {
		for _, f := range r.Fields() {
			if f.Name != "Ratelimit-Policy" {
				t.Errorf("FailOpen discloses %v", r.Fields())
				break
			}
		}
	}
}

func TestRegression2OverCapacitySlidingPrevOnly(t *testing.T) {
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

func TestRegression2ConsumeIdentityDomain(t *testing.T) {
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
