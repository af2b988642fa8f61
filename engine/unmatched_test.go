package limit_test

import (
	"context"
	"net/http"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// A request no route serves (Request.Unmatched) counts in the Shared bucket
// of every policy, PerRoute included, with no handler label, no
// route-unknown issue, and Route cleared for the policy functions; a
// PerRoute request whose route the mount cannot see still reports
// route-unknown.
func TestUnmatchedRequestsDrawOnTheSharedBucket(t *testing.T) {
	obs := &limittest.Recorder{}
	var seen limit.Request
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 2, Scope: limit.PerRoute,
		KeyFunc: func(r limit.Request) (string, error) { seen = r; return "", nil }}, limit.WithObserver(obs))
	r := req("192.0.2.1:1", "/v1/nope")
	r.Route, r.Unmatched = "/v1/notes/{id}", true // echo reports a 405 under the route's template
	check(l, context.Background(), r)
	if e := obs.Last(); e.Bucket != "2p60" || e.Handler != "" {
		t.Fatalf("event %+v, want the Shared bucket and no handler label", e)
	}
	if seen.Route != "" || !seen.Unmatched {
		t.Fatalf("KeyFunc saw Route %q Unmatched %v, want \"\" and true", seen.Route, seen.Unmatched)
	}
	if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
		t.Fatalf("%d route-unknown issues, want 0", n)
	}
	r.Route, r.Unmatched = "", false
	check(l, context.Background(), r)
	if n := obs.Issues(limit.Issue("route-unknown")); n != 1 {
		t.Fatalf("an unknown route: %d route-unknown issues, want 1", n)
	}
	// Both drew on one Shared bucket of 2.
	if resp := check(l, context.Background(), r); !resp.Denied() {
		t.Fatalf("third request in the Shared bucket: %+v, want limited", resp.Decision)
	}
}

// CORS preflights (OPTIONS with Access-Control-Request-Method) pass as
// skipped requests unless Policy.LimitPreflights is set; an OPTIONS request
// without that header is an ordinary request.
func TestPreflights(t *testing.T) {
	preflight := func(method string, acrm bool) limit.Request {
		r := req("192.0.2.1:1", "/v1/notes/1")
		r.Method = method
		h := http.Header{"Origin": {"https://app.example"}}
		if acrm {
			h.Set("Access-Control-Request-Method", "PUT")
		}
		r.Header = h
		return r
	}
	store := storeAt(epochMS)
	l := mustNew(t, store, limit.Policy{Limit: 1})
	for i := 0; i < 3; i++ {
		if resp := check(l, context.Background(), preflight("OPTIONS", true)); resp.Decision.Outcome != "" || resp.Denied() {
			t.Fatalf("preflight %d: %+v, want skipped", i, resp.Decision)
		}
	}
	if store.Calls() != 0 {
		t.Fatalf("preflights reached the store %d times", store.Calls())
	}
	for _, r := range []limit.Request{preflight("OPTIONS", false), preflight("GET", true)} {
		if resp := check(l, context.Background(), r); resp.Decision.Outcome == "" {
			t.Fatalf("%s (Access-Control-Request-Method %q): skipped, want it counted", r.Method, r.Header.Values("Access-Control-Request-Method"))
		}
	}
	opt := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, LimitPreflights: true})
	if resp := check(opt, context.Background(), preflight("OPTIONS", true)); resp.Decision.Outcome != limit.OutcomeAllowed {
		t.Fatalf("LimitPreflights: first preflight %+v, want allowed", resp.Decision)
	}
	if resp := check(opt, context.Background(), preflight("OPTIONS", true)); !resp.Denied() {
		t.Fatalf("LimitPreflights: second preflight %+v, want limited", resp.Decision)
	}
}
