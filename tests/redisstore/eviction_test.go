package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// A Store reads maxmemory-policy when it gets its client and says, once on
// its logger and in EvictionPolicy, when Redis may evict the limiter's
// state: under every allkeys-* and volatile-* policy (the limiter's keys
// all have a TTL, so volatile-* evicts them first), and promlimit's
// quotagate_store_may_evict gauge is 1. An evicted key gives its identity
// a fresh quota, so this is the one setup the store cannot make exact.
func TestEvictionPolicyIsReported(t *testing.T) {
	skipNoEnv(t, envServer, "eviction (own redis-server processes)")
	for _, tc := range []struct {
		policy string
		evicts bool
	}{
		{"allkeys-lru", true},
		{"volatile-lru", true},
		{"allkeys-random", true},
		{"noeviction", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redisfault.Start(t, "--maxmemory-policy", tc.policy)
			var log limittest.Log
			s, err := NewFromURL(srv.URL(), WithLogger(log.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			policy, evicts := s.EvictionPolicy()
			if policy != tc.policy || evicts != tc.evicts {
				t.Fatalf("EvictionPolicy() = %q, %v; want %q, %v", policy, evicts, tc.policy, tc.evicts)
			}
			want := 0
			if tc.evicts {
				want = 1
			}
			if n := log.Count("may evict rate-limit state"); n != want || (want == 1 && !strings.Contains(log.String(), "noeviction")) {
				t.Fatalf("%d warnings, want %d naming the fix: %s", n, want, log.String())
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(promlimit.NewEvictionPolicyCollector("redis", s))
			gauge := `# HELP quotagate_store_may_evict 1 when the rate-limit store's server may evict the limiter's state under its memory policy (each evicted key gives its client a fresh quota), else 0; by store and the server's policy.
# TYPE quotagate_store_may_evict gauge
quotagate_store_may_evict{policy="` + tc.policy + `",store="redis"} ` + strconv.Itoa(want) + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(gauge), promlimit.StoreMayEvict); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Under noeviction a full Redis refuses the script's writes (OOM): each
// decision then follows its policy's FailureMode, with no panic and no
// hang, and the Store's error says what Redis said; through an HTTP
// adapter that is the handler's 200 (FailOpen) or a 503 (FailClosed),
// never a 500.
func TestNoevictionWithFullMemoryAppliesTheFailureMode(t *testing.T) {
	skipNoEnv(t, envServer, "eviction (own redis-server processes)")
	srv := redisfault.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	s, err := NewFromURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxT(t)
	c := s.Client()
	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		if err := c.Do(ctx, c.B().Set().Key("fill:"+strconv.Itoa(i)).Value(big).Build()).Error(); err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("filling Redis: %v, want OOM", err)
			}
			break
		}
		if i > 10_000 {
			t.Fatal("Redis never refused a write: maxmemory not in force")
		}
	}
	// A refused write frees its own query buffer, so a small one may still
	// fit after the refusal: bring maxmemory below what is used, and memory
	// is full for any write.
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1mb").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailClosed} {
		l := limittest.MustNew(s, limit.Policy{Name: "full-" + mode.String(), Limit: 5, Window: time.Minute, FailureMode: mode}, limit.WithKeyPrefix("eviction"))
		start := time.Now()
		d, err := l.Consume(context.Background(), "u")
		if err == nil || !strings.Contains(err.Error(), "OOM") || !d.StoreFailed || d.Allowed != (mode == limit.FailOpen) {
			t.Fatalf("%v with Redis full: %+v, %v; want the failure mode and Redis's OOM error", mode, d, err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("%v: the decision took %v", mode, el)
		}
		h := httplimit.Middleware(limittest.MustNew(s, limit.Policy{Name: "full-http-" + mode.String(), Limit: 5, Window: time.Minute, FailureMode: mode}, limit.WithKeyPrefix("eviction")))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
		want := map[limit.FailureMode]int{limit.FailOpen: http.StatusOK, limit.FailClosed: http.StatusServiceUnavailable}[mode]
		for range 3 {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/a", nil)
			r.RemoteAddr = "192.0.2.7:4711"
			h.ServeHTTP(w, r)
			if w.Code != want {
				t.Fatalf("%v over HTTP with Redis full: status %d, want %d", mode, w.Code, want)
			}
		}
	}
}
