package limit_test

// Regression tests from a second attempt to break the engine: each failed
// (or guarded a fix of the first attempt) before its fix.

import (
	"context"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// Decisions: "A per-request cost larger than the capacity ... is denied
// without consuming, with Retry-After pointing at the moment the whole quota
// is back." ResetAfter is "the time until the whole quota is back".
func TestRegression2OverCapacityRetryAfterIsWholeQuotaBack(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.SlidingWindow, limit.FixedWindow} {
		l := limit.MustNew(storeAt(1_767_225_600_000), limit.Policy{Algorithm: alg, Limit: 5, Window: 5 * time.Second, AlignWindows: true})
		ctx := context.Background()
		l.ConsumeN(ctx, "u", 2)
		d, _ := l.ConsumeN(ctx, "u", 6)
		if d.Allowed {
			t.Fatalf("%v: admitted", alg)
		}
		if d.RetryAfter != d.ResetAfter {
			t.Errorf("%v: cost above capacity: RetryAfter %v, ResetAfter (whole quota back) %v", alg, d.RetryAfter, d.ResetAfter)
		}
	}
}

func TestRegression2FailureResponses(t *testing.T) {
	ctx := context.Background()
	req := limit.Request{Peer: "192.0.2.1:1"}
	// FailLocal denial from the local store.
	l := limit.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailLocal, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}, limit.WithLocalStore(storeAt(1_767_225_600_000)))
	checkHTTP(l, req)
	w := checkHTTP(l, req)
	t.Logf("FailLocal denial: %d %v", w.Code, w.Header())
	if w.Code != 429 || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Retry-After") == "" || w.Header().Get("Ratelimit") == "" {
		t.Errorf("FailLocal denial: %d %v", w.Code, w.Header())
	}
	// FailClosed: 503, Retry-After 1, no RateLimit fields even at Always.
	l = limit.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailClosed, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy | limit.HeadersTriplet})
	w = checkHTTP(l, req)
	t.Logf("FailClosed: %d %v %s", w.Code, w.Header(), w.Body)
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Ratelimit") != "" || w.Header().Get("X-Ratelimit-Reset") != "" {
		t.Errorf("FailClosed: %d %v", w.Code, w.Header())
	}
	// FailOpen allowed: no RateLimit numbers at Always.
	l = limit.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailOpen, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy | limit.HeadersTriplet})
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
	l := limit.MustNew(s, limit.Policy{Limit: 5, Window: 5 * time.Second, AlignWindows: true})
	ctx := context.Background()
	l.ConsumeN(ctx, "u", 2)
	s.advance(5000) // the next window: only prev holds requests
	d, _ := l.ConsumeN(ctx, "u", 6)
	if d.RetryAfter != d.ResetAfter {
		t.Errorf("sliding, prev only: cost above capacity: RetryAfter %v, ResetAfter (whole quota back) %v", d.RetryAfter, d.ResetAfter)
	}
}

func TestRegression2ConsumeIdentityDomain(t *testing.T) {
	l := limit.MustNew(storeAt(1_767_225_600_000), limit.Policy{Limit: 2})
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
