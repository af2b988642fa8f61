package limit

// Regression tests from a second attempt to break the engine: each failed
// (or guarded a fix of the first attempt) before its fix.

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"
)

// newFakeMem is a minimal in-process store over Op.Apply with a fixed clock.
func newFakeMem() *mapStore { return newMapStore(1_767_225_600_000) }

// Decisions: "A per-request cost larger than the capacity ... is denied
// without consuming, with Retry-After pointing at the moment the whole quota
// is back." ResetAfter is "the time until the whole quota is back".
func TestRegression2OverCapacityRetryAfterIsWholeQuotaBack(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, SlidingWindow, FixedWindow} {
		l := MustNew(newFakeMem(), Policy{Algorithm: alg, Limit: 5, Window: 5 * time.Second, AlignWindows: true})
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

type b2ErrStore struct{}

func (b2ErrStore) Take(context.Context, *Op) (Result, error) { return Result{}, errors.New("down") }

func TestRegression2FailureResponses(t *testing.T) {
	ctx := context.Background()
	req := Request{Peer: "192.0.2.1:1"}
	// FailLocal denial from the local store.
	l := MustNew(b2ErrStore{}, Policy{Limit: 1, FailureMode: FailLocal, Disclosure: DiscloseOnLimit, HeaderStyle: HeadersIETF | HeadersLegacy}, WithLocalStore(newFakeMem()))
	l.Check(ctx, req)
	r := l.Check(ctx, req)
	w := httptest.NewRecorder()
	r.WriteDenial(w)
	t.Logf("FailLocal denial: %d %v", w.Code, w.Header())
	if w.Code != 429 || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Retry-After") == "" || w.Header().Get("Ratelimit") == "" {
		t.Errorf("FailLocal denial: %d %v", w.Code, w.Header())
	}
	// FailClosed: 503, Retry-After 1, no RateLimit fields even at Always.
	l = MustNew(b2ErrStore{}, Policy{Limit: 1, FailureMode: FailClosed, Disclosure: DiscloseAlways, HeaderStyle: HeadersIETF | HeadersLegacy | HeadersTriplet})
	r = l.Check(ctx, req)
	w = httptest.NewRecorder()
	r.WriteDenial(w)
	t.Logf("FailClosed: %d %v %s", w.Code, w.Header(), w.Body)
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Ratelimit") != "" || w.Header().Get("X-Ratelimit-Reset") != "" {
		t.Errorf("FailClosed: %d %v", w.Code, w.Header())
	}
	// FailOpen allowed: no RateLimit numbers at Always.
	l = MustNew(b2ErrStore{}, Policy{Limit: 1, FailureMode: FailOpen, Disclosure: DiscloseAlways, HeaderStyle: HeadersIETF | HeadersLegacy | HeadersTriplet})
	r = l.Check(ctx, req)
	t.Logf("FailOpen fields: %v", r.Fields())
	if r.Denied() || len(r.Fields()) > 1 {
		for _, f := range r.Fields() {
			if f.Name != HeaderRateLimitPolicy {
				t.Errorf("FailOpen discloses %v", r.Fields())
				break
			}
		}
	}
}

func TestRegression2OverCapacitySlidingPrevOnly(t *testing.T) {
	s := newFakeMem()
	l := MustNew(s, Policy{Limit: 5, Window: 5 * time.Second, AlignWindows: true})
	ctx := context.Background()
	l.ConsumeN(ctx, "u", 2)
	s.now += 5000 // the next window: only prev holds requests
	d, _ := l.ConsumeN(ctx, "u", 6)
	if d.RetryAfter != d.ResetAfter {
		t.Errorf("sliding, prev only: cost above capacity: RetryAfter %v, ResetAfter (whole quota back) %v", d.RetryAfter, d.ResetAfter)
	}
}

func TestRegression2ConsumeIdentityDomain(t *testing.T) {
	l := MustNew(newFakeMem(), Policy{Limit: 2})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		l.Consume(ctx, "192.0.2.1")
		l.Consume(ctx, "192.0.2.1:1")
	}
	r := l.Check(ctx, Request{Peer: "192.0.2.1:1"})
	if r.Denied() {
		t.Errorf("Consume identity spelling an address drained the address's allowance")
	}
	// KeyFunc and Consume identities are one domain (same bucket by design);
	// a blank-after-trim identity: KeyFunc treats "  " as blank.
	d, _ := l.Consume(ctx, "  ")
	t.Logf("Consume(\"  \"): KeySource %v Limit %d", d.KeySource, d.Limit)
	if d.KeySource != KeySourceFallback {
		t.Errorf("Consume(%q): KeySource %v, Limit %d; ConsumeN doc: a blank identity draws on the shared fallback bucket (KeyFunc's blank = empty after TrimSpace)", "  ", d.KeySource, d.Limit)
	}
}
