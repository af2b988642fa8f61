package limit_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// DESIGN (Decisions, Response contract): "IETF and Triplet together.
// RateLimit-Policy then carries the -10 form only: one List cannot mix -10
// members (strings) with -06 members (integers)." HeaderStyle is a
// per-policy field, and with two mounts on one request (a global IETF limiter
// and a per-route Triplet limiter) the engine added both limiters'
// RateLimit-Policy members to the same List: a -10 string member and a -06
// integer member, the mix the design rules out.
func TestTwoMountsNeverMixDraftFormsInRateLimitPolicy(t *testing.T) {
	store := limittest.NewStore(nil)
	global, err := limit.New(store, limit.Policy{Disclosure: limit.DiscloseAlways})
	if err != nil {
		t.Fatal(err)
	}
	route, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 5, Algorithm: limit.FixedWindow,
		Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet})
	if err != nil {
		t.Fatal(err)
	}
	req := limit.Request{Route: "/v1/login", Method: "POST", Path: "/v1/login", Peer: "192.0.2.1:1"}
	h, _ := stack(req, global, route)
	pol := h.Values("Ratelimit-Policy")
	t.Logf("RateLimit-Policy: %q", pol)
	strings, ints := 0, 0
	for _, m := range pol {
		if len(m) > 0 && m[0] == '"' {
			strings++
		} else {
			ints++
		}
	}
	if strings > 0 && ints > 0 {
		t.Errorf("RateLimit-Policy mixes %d -10 (string) and %d -06 (integer) members: %q", strings, ints, pol)
	}
}

// Two limiters on one request: list fields accumulate in mount order; the
// single-value Triplet and Legacy fields carry the limiter closer to
// exhaustion, whichever mount it is.
func TestTwoLimitersMergeHeaders(t *testing.T) {
	all := limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
	store := storeAt(epochMS)
	global := mustNew(t, store, limit.Policy{Name: "global", Limit: 100, Window: time.Minute, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: all})
	login := mustNew(t, store, limit.Policy{Name: "login", Limit: 5, Window: 10 * time.Second, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: all})
	policyMember := map[*limit.Limiter]string{global: `"global";q=100;w=60`, login: `"login";q=5;w=10`}
	for _, order := range [][]*limit.Limiter{{global, login}, {login, global}} {
		store.Reset()
		h, ds := stack(req("192.0.2.9:1", "/login"), order...)
		first, second := ds[0].Bucket, ds[1].Bucket
		if got, want := h.Values("Ratelimit-Policy"), []string{policyMember[order[0]], policyMember[order[1]]}; !slices.Equal(got, want) {
			t.Fatalf("RateLimit-Policy %q, want %q", got, want)
		}
		if got := h.Values("Ratelimit"); len(got) != 2 || !strings.HasPrefix(got[0], `"`+first+`"`) || !strings.HasPrefix(got[1], `"`+second+`"`) {
			t.Fatalf("RateLimit %q, want both members in mount order", got)
		}
		// login (4 of 5 left, reset in 10 s - 0.5 s) is closer to exhaustion
		// than global (99 of 100) in either order.
		want := map[string]string{
			"Ratelimit-Limit": "5", "Ratelimit-Remaining": "4", "Ratelimit-Reset": "10",
			"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": strconv.FormatInt(epochMS/1000+10, 10),
		}
		for name, v := range want {
			if got := h.Values(name); len(got) != 1 || got[0] != v {
				t.Fatalf("%s then %s: %s %q, want exactly %q", first, second, name, got, v)
			}
		}
	}
	// Equal Remaining: the later reset wins.
	a := mustNew(t, store, limit.Policy{Name: "a", Limit: 5, Window: 10 * time.Second, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet})
	b := mustNew(t, store, limit.Policy{Name: "b", Limit: 5, Window: 60 * time.Second, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet})
	h, _ := stack(req("192.0.2.9:1", "/"), a, b)
	if h.Get("Ratelimit-Reset") != "50" || h.Get("Ratelimit-Remaining") != "4" {
		t.Fatalf("equal remaining: %v, want b's later reset 50", h)
	}
	if got := h.Values("Ratelimit-Policy"); !slices.Equal(got, []string{"5;w=10", "5;w=60"}) {
		t.Fatalf("Triplet RateLimit-Policy list %q", got)
	}
}
