package limit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// DESIGN (Identity): "First match wins: 1. Policy KeyFunc ... 3. The socket
// peer address." KeyFunc identities and address identities are written into
// one namespace ("r:<identity>", or "h:" + SHA-256 of the same text with
// WithHashKeys), so a KeyFunc value that spells an address IS that address's
// allowance. With the common "API key if present, else the client address"
// KeyFunc, anyone can send X-Api-Key: 203.0.113.7 and drain the quota of the
// anonymous client at 203.0.113.7, which has never sent a request.
func TestRegressionKeyFuncIdentityCollidesWithAddressIdentity(t *testing.T) {
	for _, hash := range []bool{false, true} {
		store := limittest.NewStore(nil)
		l, err := limit.New(store, limit.Policy{Limit: 1, KeyFunc: func(r limit.Request) (string, error) {
			if v := r.Header.Values("X-Api-Key"); len(v) > 0 {
				return v[0], nil
			}
			return "", nil // no key: fall through to the client address
		}}, limit.WithHashKeys(hash))
		if err != nil {
			t.Fatal(err)
		}
		attacker := limit.Request{Peer: "198.51.100.1:1", Header: http.Header{"X-Api-Key": {"203.0.113.7"}}}
		victim := limit.Request{Peer: "203.0.113.7:4444", Header: http.Header{}}

		if d := check(l, context.Background(), attacker).Decision; !d.Allowed || d.KeySource != limit.KeySourceKeyFunc {
			t.Fatalf("hash=%v: attacker's request: %+v", hash, d)
		}
		d := check(l, context.Background(), victim).Decision
		if d.KeySource != limit.KeySourceSocket {
			t.Fatalf("hash=%v: victim keyed by %s", hash, d.KeySource)
		}
		if !d.Allowed {
			t.Errorf("hash=%v: the first request ever of the client at 203.0.113.7 was denied: the KeyFunc identity "+
				"\"203.0.113.7\" and the socket address share one store key %q", hash, store.Keys())
		}
	}
}

// DESIGN (Decisions, Response contract): "IETF and Triplet together.
// RateLimit-Policy then carries the -10 form only: one List cannot mix -10
// members (strings) with -06 members (integers)." HeaderStyle is a
// per-policy field, and with two mounts on one request (a global IETF limiter
// and a per-route Triplet limiter) the engine adds both limiters'
// RateLimit-Policy members to the same List: a -10 string member and a -06
// integer member, the mix the design rules out.
func TestRegressionTwoMountsMixDraftFormsInRateLimitPolicy(t *testing.T) {
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

// panicHandler is a slog.Handler whose Handle panics (a broken sink, e.g. a
// handler writing to a closed pipe that panics instead of returning an error).
type panicHandler struct{}

func (panicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panicHandler) Handle(context.Context, slog.Record) error { panic("log sink broken") }
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panicHandler) WithGroup(string) slog.Handler           { return h }

// DESIGN (Policy): "Nothing in the request path panics." The engine guards
// every other caller-supplied component on the request path (KeyFunc, Skip,
// CostFunc, hooks, LimitedResponse, the Observer, the Store), but not the
// Logger: the first request with no client address (or a trusted-header
// issue, a store failure, a route-unknown fallback...) logs, and a panicking
// slog handler takes the request down (under fiber/fasthttp, which recovers
// nothing by default, the whole process).
func TestRegressionPanickingLoggerPanicsInRequestPath(t *testing.T) {
	l, err := limit.New(limittest.NewStore(nil), limit.Policy{}, limit.WithLogger(slog.New(panicHandler{})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("Check panicked: %v", p)
		}
	}()
	check(l, context.Background(), limit.Request{Peer: ""}) // no client address: logged once per 10 min
}

// DESIGN (Identity): "4. No address at all: one shared fallback bucket at
// max(1, Limit/FallbackDivisor)"; (Decisions) "A policy Cost above capacity
// is a construction error"; (Algorithms) RetryAfter is "the earliest t at
// which the same request would be allowed". New checks the policy Cost only
// against the policy's own capacity. Policy{Limit: 100, Cost: 20} is
// accepted, but its fallback bucket has capacity 10, so every request
// without a client address (every request of a server on a Unix socket,
// which the design calls out as the fallback case) is denied forever, and
// its Retry-After names an instant at which the same request is denied
// again.
func TestRegressionStaticCostAboveFallbackCapacityDeniesForever(t *testing.T) {
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
