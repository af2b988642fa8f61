package limit_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// Two Limiters built separately with the same numbers and no Name would
// share one allowance without saying so (the default bucket is the
// signature): New refuses the second on a Store that keeps Claims, naming
// both ways out. Differences that do not change the stored
// state (FailureMode, Disclosure, Scope) do not make them separate.
func TestNewRefusesASecondUnnamedLimiterWithTheSameNumbers(t *testing.T) {
	store := claimingStore()
	base := limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
	a := mustNew(t, store, base)
	for _, p := range []limit.Policy{
		base,
		{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, FailureMode: limit.FailClosed},
		{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, Disclosure: limit.DiscloseAlways},
		{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, Scope: limit.PerRoute},
	} {
		_, err := limit.New(store, p)
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "set distinct Names") ||
			!strings.Contains(err.Error(), "reuse the first Limiter") || !strings.Contains(err.Error(), "5p60f") {
			t.Fatalf("second unnamed Limiter %+v: err %v, want a refusal naming distinct Names and reuse", p, err)
		}
		if _, err := a.With(p); err == nil {
			t.Fatalf("With(%+v) on the first Limiter: accepted, want the same refusal", p)
		}
	}
	// Sharing on purpose: one Name on both.
	n1 := mustNew(t, store, limit.Policy{Name: "api", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute})
	n2 := mustNew(t, store, limit.Policy{Name: "api", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, Disclosure: limit.DiscloseAlways})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		n1.Consume(ctx, "u")
		n2.Consume(ctx, "u")
	}
	if d, _ := n1.Consume(ctx, "u"); d.Allowed {
		t.Fatalf("one Name, identical numbers: 7th call allowed, want the one allowance of 5 shared")
	}
	// Other numbers, another key prefix or another store: no conflict.
	mustNew(t, store, limit.Policy{Algorithm: limit.FixedWindow, Limit: 6, Window: time.Minute})
	mustNew(t, store, limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, AlignWindows: true})
	mustNew(t, store, base, limit.WithKeyPrefix("other"))
	mustNew(t, claimingStore(), base)
	// A Store that keeps no Claims is not checked.
	mustNew(t, errStore, base)
	mustNew(t, errStore, base)
}

// A claim lasts as long as the Store: a Limiter rebuilt with the same
// numbers is refused whether or not the first is still in use, so the
// answer never depends on the garbage collector.
func TestARebuiltUnnamedLimiterIsRefusedToo(t *testing.T) {
	store := claimingStore()
	p := limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
	func() {
		l := mustNew(t, store, p)
		l.Consume(context.Background(), "u") // used, then dropped
	}()
	runtime.GC()
	if _, err := limit.New(store, p); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("after the first Limiter was dropped: %v, want the refusal", err)
	}
	p.Name = "rebuilt"
	if _, err := limit.New(store, p); err != nil {
		t.Fatalf("the same numbers with a Name: %v", err)
	}
}

// Two policies sharing a Name but not their numbers (FixedWindow 5 per hour
// and 5 per second) once read and wrote one record, so the hour's limiter
// answered a Retry-After of ~242 years. Every key carries the state
// signature: each policy has its own record, whatever the Name. Alignment
// is part of it too (two phase rules never read one record).
func TestOneNameTwoPoliciesKeepSeparateRecords(t *testing.T) {
	store := storeAt(epochMS)
	hour := mustNew(t, store, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour})
	sec := mustNew(t, store, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		for _, l := range []*limit.Limiter{hour, sec} {
			d, err := l.Consume(ctx, "id")
			if err != nil || d.RetryAfter > time.Hour || d.ResetAfter > time.Hour || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("call %d: %+v, %v: want delays within the policy's hour", i, d, err)
			}
		}
	}
	keys := store.Keys()
	if len(keys) != 2 || !strings.Contains(keys[0]+keys[1], ":x:p3600f:") || !strings.Contains(keys[0]+keys[1], ":x:p1f:") {
		t.Fatalf("keys %q, want one record per policy", keys)
	}
	aligned := mustNew(t, store, limit.Policy{Name: "x", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour, AlignWindows: true})
	aligned.Consume(ctx, "id")
	if n := len(store.Keys()); n != 3 {
		t.Fatalf("AlignWindows shares a record with the per-identity phase (%d keys)", n)
	}
}

// Keys depend on the policy alone: replicas of one service, each with its
// own Limiter (and Store value), spell the same keys and so share their
// records in a shared store.
func TestKeysAreTheSameInEveryProcess(t *testing.T) {
	p := limit.Policy{Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5}
	var keys []string
	for i := 0; i < 2; i++ {
		store := storeAt(epochMS)
		check(mustNew(t, store, p), context.Background(), limit.Request{Route: "/v1/search", Peer: "192.0.2.9:1"})
		keys = append(keys, store.Keys()...)
	}
	if len(keys) != 2 || keys[0] != keys[1] || !strings.Contains(keys[0], ":/v1/search 1p1gb5:p1g:r:192.0.2.9") {
		t.Fatalf("keys %q, want one key, the same for both replicas", keys)
	}
}

// claimingStore is the reference store with Claims, as the memory and
// Redis stores keep them.
func claimingStore() limitstore.Store { return claiming(limittest.NewStore(nil)) }

// claiming returns s with Claims.
func claiming(s limitstore.Store) limitstore.Store {
	return &struct {
		limitstore.Store
		limitstore.Claims
	}{Store: s}
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
	if _, err := limit.New(store, p); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "20p10f+50p60f") {
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
