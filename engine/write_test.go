package limit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
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
		store.Clear()
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

// The net/http path (CheckHTTP) writes the same header fields as the
// ResponseWriter path (Check) in every configuration: each style and
// disclosure, allowed and limited, two mounts in either order (the merge
// rules), numbers below and above 100, a name too long for the one-object
// value blocks and a LimitedResponse with more fields than any block holds.
func TestCheckHTTPWritesWhatCheckWrites(t *testing.T) {
	all := limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
	many := http.Header{}
	for i := range 20 {
		many.Add("X-Extra-"+strconv.Itoa(i), "v"+strconv.Itoa(i))
	}
	many.Add("X-Extra-0", "second")
	long := strings.Repeat(`long "name" \ `, 10)
	body := []byte(strings.Repeat("x", 150))
	pols := map[string]limit.Policy{
		"ietf":    {Name: "ietf", Limit: 3, Window: time.Minute, Disclosure: limit.DiscloseAlways},
		"triplet": {Name: "triplet", Limit: 150, Window: 2 * time.Hour, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet},
		"legacy":  {Name: "legacy", Limit: 2, Window: 10 * time.Second, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersLegacy},
		"all":     {Name: "all", Limit: 1000, Window: 400 * time.Second, Disclosure: limit.DiscloseAlways, HeaderStyle: all},
		"long":    {Name: long, Limit: 1 << 29, Window: time.Hour, Disclosure: limit.DiscloseAlways, HeaderStyle: all},
		"quotas":  {Quotas: []limit.Rate{{Limit: 2, Window: time.Second}, {Limit: 500, Window: time.Hour}}, Disclosure: limit.DiscloseAlways, HeaderStyle: all},
		"default": {Limit: 2, Window: 200 * time.Second},
		"none":    {Limit: 1, Window: time.Minute, Disclosure: limit.DiscloseNone},
		"response": {Limit: 1, Window: time.Minute, Disclosure: limit.DiscloseOnLimit, HeaderStyle: all, LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
			return &limit.LimitedResponse{Header: many, Body: body}
		}},
	}
	var names []string
	for name := range pols {
		names = append(names, name)
	}
	slices.Sort(names)
	var stacks [][]string
	for _, a := range names {
		stacks = append(stacks, []string{a})
		for _, b := range names {
			if a != b {
				stacks = append(stacks, []string{a, b})
			}
		}
	}
	for _, st := range stacks {
		viaCheck, viaHTTP := storeAt(epochMS), storeAt(epochMS)
		var lc, lh []*limit.Limiter
		for _, name := range st {
			lc = append(lc, mustNew(t, viaCheck, pols[name]))
			lh = append(lh, mustNew(t, viaHTTP, pols[name]))
		}
		for i := range 4 { // allowed, then limited by the small quotas
			// Both chains stop at the first mount that limits, as an
			// adapter's does.
			r := req("192.0.2.9:1", "/x")
			cw := limittest.NewWriter()
			for _, l := range lc {
				if !l.Check(context.Background(), r, cw).Allowed {
					break
				}
			}
			hr := httptest.NewRequest("GET", "/x", nil)
			hr.RemoteAddr = r.Peer
			w := httptest.NewRecorder()
			for _, l := range lh {
				if !l.CheckHTTP(w, hr, limit.Request{Route: "/x"}).Allowed {
					break
				}
			}
			got := w.Header().Clone()
			got.Del("Content-Length")
			if !headersEqual(got, cw.Header) {
				t.Fatalf("%v request %d:\nCheckHTTP %v\nCheck     %v", st, i, got, cw.Header)
			}
		}
	}
}

// headersEqual reports whether a and b hold the same fields and values.
func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// The values CheckHTTP puts in a header map share one object, but each
// field's slice is its own: an Add to one field (a later mount, the
// handler), a Set, or a write through one field's slice changes no other.
func TestCheckHTTPFieldValuesDoNotAlias(t *testing.T) {
	all := limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
	for _, p := range []limit.Policy{
		{Limit: 500, Window: time.Hour, Disclosure: limit.DiscloseAlways, HeaderStyle: all},
		{Limit: 500, Window: time.Hour, Disclosure: limit.DiscloseAlways},
		{Limit: 1, Window: time.Hour, Disclosure: limit.DiscloseOnLimit, HeaderStyle: all},
	} {
		l := mustNew(t, storeAt(epochMS), p)
		r := httptest.NewRequest("GET", "/x", nil)
		var w *httptest.ResponseRecorder
		for range 2 { // the second exhausts the quota of 1
			w = httptest.NewRecorder()
			l.CheckHTTP(w, r, limit.Request{})
		}
		h := w.Header()
		want := h.Clone()
		for name := range want {
			h.Add(name, "added")
			h[name][0] = "overwritten"
			for other, v := range want {
				if other != name && !slices.Equal(h[other], v) {
					t.Fatalf("%s changed by an Add to %s: %q, want %q", other, name, h[other], v)
				}
			}
			h[name] = append(h[name][:0], want[name]...)
			if h.Set(name, want[name][0]); len(h[name]) != 1 {
				t.Fatalf("%s after Set: %q", name, h[name])
			}
		}
	}
}

// Two stacked mounts, the later one limiting: the 429's single-value
// fields (Triplet and Legacy) are the limiting mount's, so that they agree
// with its Retry-After, not the earlier mount's, whose charge is given back.
func TestALimitedResponseCarriesTheLimitingMountsTriplet(t *testing.T) {
	s := storeAt(epochMS)
	pol := func(name string, n int64, w time.Duration) limit.Policy {
		return limit.Policy{Name: name, Algorithm: limit.FixedWindow, AlignWindows: true, Limit: n, Window: w,
			Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet | limit.HeadersLegacy}
	}
	global := mustNew(t, s, pol("global", 2, 100*time.Second))
	route, err := global.With(pol("route", 1, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h := global.HTTPHandler(route.HTTPHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), nil, nil), nil, nil)
	do := func() http.Header {
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
			t.Fatalf("status %d", w.Code)
		}
		return w.Header()
	}
	do()
	got := do() // the global admits (0 left), the route limits
	if got.Get("Retry-After") == "" || got.Get("Ratelimit-Reset") != got.Get("Retry-After") || got.Get("Ratelimit-Limit") != "1" {
		t.Fatalf("429: Retry-After %q, RateLimit-Limit %q, RateLimit-Reset %q: want the route's limit and a reset equal to Retry-After",
			got.Get("Retry-After"), got.Get("Ratelimit-Limit"), got.Get("Ratelimit-Reset"))
	}
	if got.Get("X-Ratelimit-Limit") != "1" {
		t.Fatalf("429: X-RateLimit-Limit %q, want the route's 1", got.Get("X-Ratelimit-Limit"))
	}
}
