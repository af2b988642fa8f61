package limit_test

import (
	"context"
	"errors"
	"github.com/quotagate/quotagate/engine/limitstore"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

func TestNewValidatesPolicyFields(t *testing.T) {
	store := storeAt(0)
	tests := []struct {
		name  string
		p     limit.Policy
		field string // must appear in the error; "" means valid
	}{
		{"zero_value_takes_defaults", limit.Policy{}, ""},
		{"negative_limit", limit.Policy{Limit: -1}, "Limit"},
		{"negative_window", limit.Policy{Window: -time.Second}, "Window"},
		{"window_over_24h", limit.Policy{Window: 25 * time.Hour}, "Window"},
		{"window_sub_millisecond", limit.Policy{Window: 1500 * time.Microsecond}, "Window"},
		{"negative_cost", limit.Policy{Cost: -2}, "Cost"},
		{"cost_over_limit", limit.Policy{Limit: 3, Cost: 4}, "Cost"},
		{"burst_on_window_algorithm", limit.Policy{Burst: 5}, "Burst"},
		{"token_bucket_3_per_second", limit.Policy{Algorithm: limit.TokenBucket, Limit: 3, Window: time.Second}, ""},
		{"token_bucket_7_per_minute", limit.Policy{Algorithm: limit.TokenBucket, Limit: 7, Window: time.Minute}, ""},
		{"token_bucket_3000_per_second", limit.Policy{Algorithm: limit.TokenBucket, Limit: 3000, Window: time.Second}, ""},
		{"token_bucket_exact_interval", limit.Policy{Algorithm: limit.TokenBucket, Limit: 4, Window: time.Second, Burst: 10}, ""},
		{"token_bucket_refill_at_max", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 365}, ""},
		{"token_bucket_refill_over_max", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 366}, "Burst"},
		{"token_bucket_burst_over_exact_math", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1 << 40, Window: time.Second, Burst: 1 << 41}, "Burst"},
		{"token_bucket_limit_over_exact_math", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1<<50 + 1, Window: time.Second}, "Limit"},
		{"cost_over_burst", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 2, Cost: 3}, "Cost"},
		{"name_with_colon", limit.Policy{Name: "a:b"}, "Name"},
		{"name_blank", limit.Policy{Name: "   "}, "Name"},
		{"name_non_ascii", limit.Policy{Name: "caf\u00e9"}, "Name"},
		{"name_with_quote_is_fine", limit.Policy{Name: `say "hi" \o/`}, ""},
		{"limit_too_large_for_exact_math", limit.Policy{Limit: 1 << 40, Window: 24 * time.Hour}, "Limit"},
		{"unknown_algorithm", limit.Policy{Algorithm: 9}, "Algorithm"},
		{"unknown_disclosure", limit.Policy{Disclosure: 9}, "Disclosure"},
		{"unknown_header_style", limit.Policy{HeaderStyle: 64}, "HeaderStyle"},
		{"fail_local_without_store", limit.Policy{FailureMode: limit.FailLocal}, "FailLocal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := limit.New(store, tt.p)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) || !errors.Is(err, limit.ErrInvalidPolicy) {
				t.Fatalf("New: %v, want an ErrInvalidPolicy naming %s", err, tt.field)
			}
		})
	}
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  limit.Option
	}{
		{"prefix_with_brace", limit.WithKeyPrefix("a{b")},
		{"prefix_with_colon", limit.WithKeyPrefix("a:b")},
		{"prefix_empty", limit.WithKeyPrefix("")},
		{"nil_logger", limit.WithLogger(nil)},
		{"nil_observer", limit.WithObserver(nil)},
		{"divisor_zero", limit.WithFallbackDivisor(0)},
		{"ipv4_prefix_33", limit.WithAddressPrefixes(33, 64)},
		{"ipv6_prefix_0", limit.WithAddressPrefixes(32, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := limit.New(storeAt(0), limit.Policy{}, tt.opt); !errors.Is(err, limit.ErrInvalidOption) {
				t.Fatalf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := limit.New(nil, limit.Policy{}); err == nil {
		t.Fatal("New(nil store): want an error")
	}
}

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

func TestStoreKeyLayout(t *testing.T) {
	store := storeAt(0)
	l := limittest.MustNew(store, limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 5}, limit.WithKeyPrefix("app"))
	check(l, context.Background(), limit.Request{Route: "/v1/{a}/{b}", Peer: "[::ffff:192.0.2.1]:40003"})
	check(l, context.Background(), limit.Request{Route: "/v1/{a}/{b}", Peer: "192.0.2.1:40001"})
	if len(store.Keys()) != 1 {
		t.Fatalf("mapped and plain IPv4 made %d keys, want 1 identity", len(store.Keys()))
	}
	key := store.Keys()[0]
	// app:{xxxxxxxx}:/v1/{a}/{b} 5p60f:5p60f:r:192.0.2.1
	if !strings.HasPrefix(key, "app:{") || key[13] != '}' || !strings.HasSuffix(key, ":/v1/{a}/{b} 5p60f:5p60f:r:192.0.2.1") {
		t.Fatalf("key %q does not follow <prefix>:{<tag>}:<bucket>:<state signature>:r:<identity>", key)
	}
	hashed := limittest.MustNew(store, limit.Policy{}, limit.WithHashKeys(true))
	check(hashed, context.Background(), limit.Request{Peer: "192.0.2.1:1"})
	long := limittest.MustNew(store, limit.Policy{KeyFunc: func(limit.Request) (string, error) { return strings.Repeat("k", 200), nil }})
	check(long, context.Background(), limit.Request{})
	for _, k := range store.Keys()[1:] { // the first is the raw key above
		if !strings.Contains(k, ":h:") || strings.Contains(k, "192.0.2.1") || strings.Contains(k, "kkkk") {
			t.Fatalf("key %q: want a hashed identity", k)
		}
	}
}

func TestIdentityChain(t *testing.T) {
	store := storeAt(0)
	keyFunc := func(r limit.Request) (string, error) {
		switch r.Path {
		case "/user":
			return "user-1", nil
		case "/error":
			return "ignored", errors.New("no user")
		case "/panic":
			panic("boom")
		}
		return "  ", nil
	}
	l := limittest.MustNew(store, limit.Policy{Limit: 20, KeyFunc: keyFunc})
	tests := []struct {
		name, path, peer string
		want             limit.KeySource
		limit            int64
	}{
		{"key_func", "/user", "192.0.2.1:1", limit.KeySourceKeyFunc, 20},
		{"key_func_error_falls_through", "/error", "192.0.2.1:1", limit.KeySourceSocket, 20},
		{"key_func_blank_falls_through", "/blank", "192.0.2.1:1", limit.KeySourceSocket, 20},
		{"key_func_panic_falls_through", "/panic", "192.0.2.1:1", limit.KeySourceSocket, 20},
		{"no_peer_is_fallback", "/blank", "", limit.KeySourceFallback, 2},
		{"garbage_peer_is_fallback", "/blank", "not-an-ip", limit.KeySourceFallback, 2},
		{"unspecified_peer_is_fallback", "/blank", "0.0.0.0:1", limit.KeySourceFallback, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := check(l, context.Background(), limit.Request{Path: tt.path, Peer: tt.peer}).Decision
			if d.KeySource != tt.want || d.Limit != tt.limit {
				t.Fatalf("source %s limit %d, want %s %d", d.KeySource, d.Limit, tt.want, tt.limit)
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

func TestStoreFailureModes(t *testing.T) {
	down := limittest.FailingStore{Err: errors.New("connection refused")}
	local := storeAt(0)
	tests := []struct {
		name    string
		store   limitstore.Store
		mode    limit.FailureMode
		allowed bool
		outcome limit.Outcome
		status  int
	}{
		{"fail_open", down, limit.FailOpen, true, limit.OutcomeDegraded, 0},
		{"fail_closed", down, limit.FailClosed, false, limit.OutcomeLimited, 503},
		{"fail_local", down, limit.FailLocal, true, limit.OutcomeDegraded, 0},
		{"panicking_store_is_a_failure", panickingStore, limit.FailOpen, true, limit.OutcomeDegraded, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []limit.Option
			if tt.mode == limit.FailLocal {
				opts = append(opts, limit.WithLocalStore(local))
			}
			l := limittest.MustNew(tt.store, limit.Policy{FailureMode: tt.mode, Disclosure: limit.DiscloseAlways}, opts...)
			r := check(l, context.Background(), limit.Request{Peer: "192.0.2.1:1"})
			if r.Decision.Allowed != tt.allowed || r.Decision.Outcome != tt.outcome || r.Status != tt.status {
				t.Fatalf("allowed=%v outcome=%s status=%d", r.Decision.Allowed, r.Decision.Outcome, r.Status)
			}
			if tt.mode == limit.FailOpen {
				for _, f := range r.Fields() {
					if strings.HasPrefix(f.Name, "Ratelimit") {
						t.Fatalf("fail-open response claims numbers it does not know: %v", r.Fields())
					}
				}
			}
		})
	}
}

// A local store given to a policy that does not fail local would be
// ignored (4 of Limit 2 admitted with the store down): New refuses it,
// naming both settings; With may still derive policies of any mode.
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
	if _, err := l.With(limit.Policy{Limit: 2, FailureMode: limit.FailClosed}); err != nil {
		t.Fatalf("With a FailClosed policy: %v", err)
	}
}
