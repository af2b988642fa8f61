package limit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// mapStore is the simplest correct Store: one mutex, one map, a settable
// clock in Unix ms. It is what every real store must be equivalent to.
type mapStore struct {
	mu    sync.Mutex
	now   int64
	m     map[string]mapEntry
	keys  []string // every key written, in order
	takes int      // calls of Take
}

type mapEntry struct {
	st  State
	exp int64
}

func newMapStore(now int64) *mapStore { return &mapStore{now: now, m: map[string]mapEntry{}} }

func (s *mapStore) Take(_ context.Context, op *Op) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	var sts [MaxQuotas]State
	var live [MaxQuotas]bool
	for i := range op.N {
		if e, ok := s.m[string(op.Quotas[i].Key)]; ok && e.exp > s.now {
			sts[i], live[i] = e.st, true
		}
	}
	res := op.Apply(&sts, s.now)
	for i := range op.N {
		k := string(op.Quotas[i].Key)
		switch {
		case !res.Allowed || res.Quotas[i].TTLMS == 0:
		case op.Refund:
			if live[i] {
				s.m[k] = mapEntry{sts[i], s.m[k].exp}
			}
		default:
			s.m[k] = mapEntry{sts[i], s.now + res.Quotas[i].TTLMS}
			s.keys = append(s.keys, k)
		}
	}
	return res, nil
}

func (s *mapStore) InProcess() {}

func (s *mapStore) advance(ms int64) {
	s.mu.Lock()
	s.now += ms
	s.mu.Unlock()
}

func TestNewValidatesPolicyFields(t *testing.T) {
	store := newMapStore(0)
	tests := []struct {
		name  string
		p     Policy
		field string // must appear in the error; "" means valid
	}{
		{"zero_value_takes_defaults", Policy{}, ""},
		{"negative_limit", Policy{Limit: -1}, "Limit"},
		{"negative_window", Policy{Window: -time.Second}, "Window"},
		{"window_over_24h", Policy{Window: 25 * time.Hour}, "Window"},
		{"window_sub_millisecond", Policy{Window: 1500 * time.Microsecond}, "Window"},
		{"negative_cost", Policy{Cost: -2}, "Cost"},
		{"cost_over_limit", Policy{Limit: 3, Cost: 4}, "Cost"},
		{"burst_on_window_algorithm", Policy{Burst: 5}, "Burst"},
		{"token_bucket_3_per_second", Policy{Algorithm: TokenBucket, Limit: 3, Window: time.Second}, ""},
		{"token_bucket_7_per_minute", Policy{Algorithm: TokenBucket, Limit: 7, Window: time.Minute}, ""},
		{"token_bucket_3000_per_second", Policy{Algorithm: TokenBucket, Limit: 3000, Window: time.Second}, ""},
		{"token_bucket_exact_interval", Policy{Algorithm: TokenBucket, Limit: 4, Window: time.Second, Burst: 10}, ""},
		{"token_bucket_refill_at_max", Policy{Algorithm: TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 365}, ""},
		{"token_bucket_refill_over_max", Policy{Algorithm: TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 366}, "Burst"},
		{"token_bucket_burst_over_exact_math", Policy{Algorithm: TokenBucket, Limit: 1 << 40, Window: time.Second, Burst: 1 << 41}, "Burst"},
		{"token_bucket_limit_over_exact_math", Policy{Algorithm: TokenBucket, Limit: 1<<50 + 1, Window: time.Second}, "Limit"},
		{"cost_over_burst", Policy{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Burst: 2, Cost: 3}, "Cost"},
		{"name_with_colon", Policy{Name: "a:b"}, "Name"},
		{"name_blank", Policy{Name: "   "}, "Name"},
		{"name_non_ascii", Policy{Name: "caf\u00e9"}, "Name"},
		{"name_with_quote_is_fine", Policy{Name: `say "hi" \o/`}, ""},
		{"limit_too_large_for_exact_math", Policy{Limit: 1 << 40, Window: 24 * time.Hour}, "Limit"},
		{"unknown_algorithm", Policy{Algorithm: 9}, "Algorithm"},
		{"unknown_disclosure", Policy{Disclosure: 9}, "Disclosure"},
		{"unknown_header_style", Policy{HeaderStyle: 64}, "HeaderStyle"},
		{"fail_local_without_store", Policy{FailureMode: FailLocal}, "FailLocal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(store, tt.p)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("New: %v, want an ErrInvalidPolicy naming %s", err, tt.field)
			}
		})
	}
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
	}{
		{"prefix_with_brace", WithKeyPrefix("a{b")},
		{"prefix_with_colon", WithKeyPrefix("a:b")},
		{"prefix_empty", WithKeyPrefix("")},
		{"timeout_zero", WithStoreTimeout(0)},
		{"nil_logger", WithLogger(nil)},
		{"nil_observer", WithObserver(nil)},
		{"divisor_zero", WithFallbackDivisor(0)},
		{"ipv4_prefix_33", WithAddressPrefixes(33, 64)},
		{"ipv6_prefix_0", WithAddressPrefixes(32, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(newMapStore(0), Policy{}, tt.opt); !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := New(nil, Policy{}); err == nil {
		t.Fatal("New(nil store): want an error")
	}
}

func TestRetryAfterSecondsRoundsUp(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want int64
	}{
		{"9.5s_is_10", 9500 * time.Millisecond, 10},
		{"0.3s_is_1", 300 * time.Millisecond, 1},
		{"exact_second", 2 * time.Second, 2},
		{"one_ms_over", 2001 * time.Millisecond, 3},
		{"zero_is_1", 0, 1},
		{"negative_is_1", -time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RetryAfterSeconds(Decision{RetryAfter: tt.in}); got != tt.want {
				t.Fatalf("RetryAfterSeconds(%v) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func check(t *testing.T, l *Limiter, peer string) Response {
	t.Helper()
	return l.Check(context.Background(), Request{Peer: peer, Path: "/x", Method: "GET"})
}

// A client that keeps retrying while denied is admitted again exactly when
// Retry-After said, in every algorithm, and not one millisecond earlier.
func TestRetryingWhileDeniedIsAdmittedExactlyAtRetryAfter(t *testing.T) {
	for _, p := range []Policy{
		{Algorithm: FixedWindow, Limit: 3, Window: 10 * time.Second},
		{Algorithm: SlidingWindow, Limit: 3, Window: 10 * time.Second},
		{Algorithm: TokenBucket, Limit: 2, Window: 10 * time.Second, Burst: 3},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			store := newMapStore(1_700_000_000_123)
			l := MustNew(store, p)
			for i := 0; i < 3; i++ {
				if r := check(t, l, "192.0.2.7:1000"); r.Denied() {
					t.Fatalf("request %d denied", i)
				}
			}
			r := check(t, l, "192.0.2.7:1000")
			if !r.Denied() {
				t.Fatal("4th request admitted")
			}
			wait := r.Decision.RetryAfter.Milliseconds()
			// retry every 100 ms while denied: nothing is consumed, and the
			// promised instant does not move
			for waited := int64(0); waited+100 < wait; waited += 100 {
				store.advance(100)
				r2 := check(t, l, "192.0.2.7:1000")
				if !r2.Denied() {
					t.Fatalf("admitted after %d ms, Retry-After promised %d ms", waited+100, wait)
				}
				if got := r2.Decision.RetryAfter.Milliseconds(); got != wait-waited-100 {
					t.Fatalf("after %d ms the delay is %d ms, want %d", waited+100, got, wait-waited-100)
				}
			}
			// jump to exactly the promised instant (from the first denial)
			store.mu.Lock()
			store.now = 1_700_000_000_123 + wait
			store.mu.Unlock()
			if r := check(t, l, "192.0.2.7:1000"); r.Denied() {
				t.Fatalf("denied at the promised instant (+%d ms)", wait)
			}
		})
	}
}

func TestFixedWindowPhasePerIdentity(t *testing.T) {
	l := MustNew(newMapStore(0), Policy{Algorithm: FixedWindow, Limit: 1, Window: time.Minute})
	phase := func(id string) int64 {
		sc := &scratch{}
		sc.id = l.appendIdentity(nil, id)
		_, _, ph := l.appendKey(nil, l.sharedRef, sc.id)
		return ph
	}
	if first, again := phase("198.51.100.1"), phase("198.51.100.1"); first != again {
		t.Fatal("phase is not stable for one identity")
	}
	seen := map[int64]bool{}
	for _, id := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "2001:db8::", "user-42"} {
		ph := phase(id)
		if ph < 0 || ph >= 60_000 {
			t.Fatalf("phase %d outside the window", ph)
		}
		seen[ph] = true
	}
	if len(seen) < 4 {
		t.Fatalf("phases barely differ between identities: %v", seen)
	}
	aligned := MustNew(newMapStore(0), Policy{Algorithm: FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true})
	if _, _, ph := aligned.appendKey(nil, aligned.sharedRef, []byte("r:198.51.100.1")); ph != 0 {
		t.Fatalf("AlignWindows phase %d, want 0", ph)
	}
}

func TestTokenBucketBurstAndRefill(t *testing.T) {
	store := newMapStore(5_000_000)
	// 1 token per second, burst 5
	l := MustNew(store, Policy{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Burst: 5})
	for i := 0; i < 5; i++ {
		r := check(t, l, "203.0.113.9:1")
		if r.Denied() || r.Decision.Remaining != int64(4-i) {
			t.Fatalf("burst request %d: denied=%v remaining=%d", i, r.Denied(), r.Decision.Remaining)
		}
	}
	r := check(t, l, "203.0.113.9:1")
	if !r.Denied() || r.Decision.RetryAfter != time.Second {
		t.Fatalf("6th: denied=%v retry=%v, want denied for 1s", r.Denied(), r.Decision.RetryAfter)
	}
	store.advance(999)
	if r := check(t, l, "203.0.113.9:1"); !r.Denied() {
		t.Fatal("admitted 1 ms before a token refilled")
	}
	store.advance(1)
	if r := check(t, l, "203.0.113.9:1"); r.Denied() {
		t.Fatal("denied when a token had refilled")
	}
	// a long idle period refills to Burst, not beyond
	store.advance(60_000)
	if r := check(t, l, "203.0.113.9:1"); r.Decision.Remaining != 4 {
		t.Fatalf("after idling, remaining %d, want 4 (burst 5 minus this one)", r.Decision.Remaining)
	}
}

func TestCostAboveRemainingIsDeniedWithoutConsuming(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			store := newMapStore(0)
			cost := int64(1)
			p := Policy{Algorithm: alg, Limit: 5, Window: 5 * time.Second, AlignWindows: true,
				CostFunc: func(Request) int64 { return cost }}
			l := MustNew(store, p)
			for i := 0; i < 3; i++ {
				check(t, l, "192.0.2.1:9")
			}
			cost = 3 // 2 remain
			if r := check(t, l, "192.0.2.1:9"); !r.Denied() || r.Decision.Remaining != 2 {
				t.Fatalf("cost 3 with 2 remaining: denied=%v remaining=%d", r.Denied(), r.Decision.Remaining)
			}
			cost = 1_000_000 // far above the capacity: denied, never an overflow
			if r := check(t, l, "192.0.2.1:9"); !r.Denied() || r.Decision.RetryAfter <= 0 {
				t.Fatalf("huge cost: denied=%v retry=%v", r.Denied(), r.Decision.RetryAfter)
			}
			cost = 2 // the denied requests consumed nothing
			if r := check(t, l, "192.0.2.1:9"); r.Denied() || r.Decision.Remaining != 0 {
				t.Fatalf("cost 2 with 2 remaining: denied=%v remaining=%d", r.Denied(), r.Decision.Remaining)
			}
		})
	}
}

func TestBuckets(t *testing.T) {
	store := newMapStore(0)
	tests := []struct {
		name  string
		p     Policy
		route string
		want  string
	}{
		{"shared_signature", Policy{}, "/a/{id}", "100p60"},
		{"fixed_signature", Policy{Algorithm: FixedWindow, Limit: 5}, "", "5p60f"},
		{"gcra_signature_with_burst", Policy{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Burst: 5}, "", "1p1gb5"},
		{"subsecond_window", Policy{Limit: 10, Window: 500 * time.Millisecond}, "", "10p500ms"},
		{"name_wins", Policy{Name: "login", Scope: PerRoute}, "/a/{id}", "login"},
		{"per_route_chi", Policy{Scope: PerRoute}, "/v1/notes/{id}", "/v1/notes/{id} 100p60"},
		{"per_route_echo", Policy{Scope: PerRoute}, "/v1/notes/:id", "/v1/notes/{id} 100p60"},
		{"per_route_nethttp_method", Policy{Scope: PerRoute}, "GET /v1/notes/{id}", "/v1/notes/{id} 100p60"},
		{"per_route_chi_regexp", Policy{Scope: PerRoute}, "/v1/notes/{id:[0-9]+}", "/v1/notes/{id} 100p60"},
		{"per_route_unknown_falls_back", Policy{Scope: PerRoute}, "", "100p60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MustNew(store, tt.p)
			if got := l.Check(context.Background(), Request{Route: tt.route, Peer: "192.0.2.1:1"}).Decision.Bucket; got != tt.want {
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
			if got := NormalizeRoute(tt.in); got != tt.want {
				t.Fatalf("NormalizeRoute(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStoreKeyLayout(t *testing.T) {
	store := newMapStore(0)
	l := MustNew(store, Policy{Scope: PerRoute, Algorithm: FixedWindow, Limit: 5}, WithKeyPrefix("app"))
	l.Check(context.Background(), Request{Route: "/v1/{a}/{b}", Peer: "[::ffff:192.0.2.1]:40003"})
	l.Check(context.Background(), Request{Route: "/v1/{a}/{b}", Peer: "192.0.2.1:40001"})
	if len(store.m) != 1 {
		t.Fatalf("mapped and plain IPv4 made %d keys, want 1 identity", len(store.m))
	}
	key := store.keys[0]
	// app:{xxxxxxxx}:/v1/{a}/{b} 5p60f:f:r:192.0.2.1
	if !strings.HasPrefix(key, "app:{") || key[13] != '}' || !strings.HasSuffix(key, ":/v1/{a}/{b} 5p60f:f:r:192.0.2.1") {
		t.Fatalf("key %q does not follow <prefix>:{<tag>}:<bucket>:<alg>:r:<identity>", key)
	}
	hashed := MustNew(store, Policy{}, WithHashKeys(true))
	hashed.Check(context.Background(), Request{Peer: "192.0.2.1:1"})
	long := MustNew(store, Policy{KeyFunc: func(Request) (string, error) { return strings.Repeat("k", 200), nil }})
	long.Check(context.Background(), Request{})
	for _, k := range store.keys[2:] { // the first two are the raw key above
		if !strings.Contains(k, ":h:") || strings.Contains(k, "192.0.2.1") || strings.Contains(k, "kkkk") {
			t.Fatalf("key %q: want a hashed identity", k)
		}
	}
}

func TestIdentityChain(t *testing.T) {
	store := newMapStore(0)
	keyFunc := func(r Request) (string, error) {
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
	l := MustNew(store, Policy{Limit: 20, KeyFunc: keyFunc})
	tests := []struct {
		name, path, peer string
		want             KeySource
		limit            int64
	}{
		{"key_func", "/user", "192.0.2.1:1", KeySourceKeyFunc, 20},
		{"key_func_error_falls_through", "/error", "192.0.2.1:1", KeySourceSocket, 20},
		{"key_func_blank_falls_through", "/blank", "192.0.2.1:1", KeySourceSocket, 20},
		{"key_func_panic_falls_through", "/panic", "192.0.2.1:1", KeySourceSocket, 20},
		{"no_peer_is_fallback", "/blank", "", KeySourceFallback, 2},
		{"garbage_peer_is_fallback", "/blank", "not-an-ip", KeySourceFallback, 2},
		{"unspecified_peer_is_fallback", "/blank", "0.0.0.0:1", KeySourceFallback, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := l.Check(context.Background(), Request{Path: tt.path, Peer: tt.peer}).Decision
			if d.KeySource != tt.want || d.Limit != tt.limit {
				t.Fatalf("source %s limit %d, want %s %d", d.KeySource, d.Limit, tt.want, tt.limit)
			}
		})
	}
}

func TestConsume(t *testing.T) {
	store := newMapStore(0)
	l := MustNew(store, Policy{Name: "jobs", Limit: 2, Algorithm: FixedWindow})
	for i := 0; i < 2; i++ {
		if d, err := l.Consume(context.Background(), "tenant-a"); err != nil || !d.Allowed || d.Bucket != "jobs" {
			t.Fatalf("consume %d: %+v %v", i, d, err)
		}
	}
	if d, _ := l.Consume(context.Background(), "tenant-a"); d.Allowed || d.Outcome != OutcomeLimited {
		t.Fatalf("third consume: %+v", d)
	}
	if d, _ := l.ConsumeN(context.Background(), "tenant-b", 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("ConsumeN(2) for another tenant: %+v", d)
	}
}

type failingStore struct{ err error }

func (s failingStore) Take(context.Context, *Op) (Result, error) { return Result{}, s.err }

type panickingStore struct{}

func (panickingStore) Take(context.Context, *Op) (Result, error) { panic("store bug") }

func TestStoreFailureModes(t *testing.T) {
	down := failingStore{errors.New("connection refused")}
	local := newMapStore(0)
	tests := []struct {
		name    string
		store   Store
		mode    FailureMode
		allowed bool
		outcome Outcome
		status  int
	}{
		{"fail_open", down, FailOpen, true, OutcomeDegraded, 0},
		{"fail_closed", down, FailClosed, false, OutcomeLimited, 503},
		{"fail_local", down, FailLocal, true, OutcomeDegraded, 0},
		{"panicking_store_is_a_failure", panickingStore{}, FailOpen, true, OutcomeDegraded, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MustNew(tt.store, Policy{FailureMode: tt.mode, Disclosure: DiscloseAlways}, WithLocalStore(local))
			r := l.Check(context.Background(), Request{Peer: "192.0.2.1:1"})
			if r.Decision.Allowed != tt.allowed || r.Decision.Outcome != tt.outcome || r.Status != tt.status {
				t.Fatalf("allowed=%v outcome=%s status=%d", r.Decision.Allowed, r.Decision.Outcome, r.Status)
			}
			if tt.mode == FailOpen {
				for _, f := range r.Fields() {
					if strings.HasPrefix(f.Name, "Ratelimit") {
						t.Fatalf("fail-open response claims numbers it does not know: %v", r.Fields())
					}
				}
			}
		})
	}
}
