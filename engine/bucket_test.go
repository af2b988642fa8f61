package limit_test

import (
	"context"
	"testing"
	"time"

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

func TestBuckets(t *testing.T) {
	store := storeAt(0)
	tests := []struct {
		name  string
		p     limit.Policy
		route string
		want  string
	}{
		{"shared_signature", limit.Policy{}, "/a/{id}", "100p60"},
		{"fixed_signature", limit.Policy{Algorithm: limit.FixedWindow, Limit: 5}, "", "5p60f"},
		{"gcra_signature_with_burst", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5}, "", "1p1gb5"},
		{"subsecond_window", limit.Policy{Limit: 10, Window: 500 * time.Millisecond}, "", "10p500ms"},
		{"name_wins", limit.Policy{Name: "login", Scope: limit.PerRoute}, "/a/{id}", "login"},
		{"per_route_chi", limit.Policy{Scope: limit.PerRoute}, "/v1/notes/{id}", "/v1/notes/{id} 100p60"},
		{"per_route_echo", limit.Policy{Scope: limit.PerRoute}, "/v1/notes/:id", "/v1/notes/{id} 100p60"},
		{"per_route_nethttp_method", limit.Policy{Scope: limit.PerRoute}, "GET /v1/notes/{id}", "/v1/notes/{id} 100p60"},
		{"per_route_chi_regexp", limit.Policy{Scope: limit.PerRoute}, "/v1/notes/{id:[0-9]+}", "/v1/notes/{id} 100p60"},
		{"per_route_unknown_falls_back", limit.Policy{Scope: limit.PerRoute}, "", "100p60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := limittest.MustNew(store, tt.p)
			if got := check(l, context.Background(), limit.Request{Route: tt.route, Peer: "192.0.2.1:1"}).Decision.Bucket; got != tt.want {
				t.Fatalf("bucket %q, want %q", got, tt.want)
			}
		})
	}
}

// BucketsByRoute is true exactly for the policies whose bucket is the
// route: PerRoute without a Name (a named policy has one bucket whatever the
// route, and an observer or a policy function reads the route without
// making it the bucket).
func TestBucketsByRoute(t *testing.T) {
	store := storeAt(0)
	tests := []struct {
		name string
		p    limit.Policy
		opts []limit.Option
		want bool
	}{
		{"shared", limit.Policy{}, nil, false},
		{"shared_observed_with_functions", limit.Policy{KeyFunc: func(limit.Request) (string, error) { return "", nil }},
			[]limit.Option{limit.WithObserver(&limittest.Recorder{})}, false},
		{"per_route", limit.Policy{Scope: limit.PerRoute}, nil, true},
		{"per_route_named", limit.Policy{Scope: limit.PerRoute, Name: "login"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := limittest.MustNew(store, tt.p, tt.opts...).BucketsByRoute(); got != tt.want {
				t.Fatalf("BucketsByRoute() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNormalizeRoute(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"chi", "/v1/notes/{id}", "/v1/notes/{id}"},
		{"chi_regexp", "/v1/{year:[0-9]{4}}/x", "/v1/{year}/x"},
		{"echo_gin_colon", "/users/:id/posts/:pid", "/users/{id}/posts/{pid}"},
		{"gin_catch_all", "/static/*filepath", "/static/{filepath}"},
		{"bare_wildcard", "/files/*", "/files/*"},
		{"fiber_optional", "/v1/notes/:id?", "/v1/notes/{id}"},
		{"fiber_constraint", "/v1/notes/:id<int>", "/v1/notes/{id}"},
		{"fiber_constraint_args", "/v1/notes/:id<min(5);max(9)>", "/v1/notes/{id}"},
		{"nethttp_method", "GET /items/{id}", "/items/{id}"},
		{"nethttp_host", "GET example.com/items/{id}", "/items/{id}"},
		{"nethttp_rest", "/files/{path...}", "/files/{path}"},
		{"nethttp_anchor", "/{$}", "/"},
		{"nethttp_anchor_sub", "/a/{$}", "/a/"},
		{"root", "/", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := limit.NormalizeRoute(tt.in); got != tt.want {
				t.Fatalf("NormalizeRoute(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
