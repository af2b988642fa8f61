package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// A Store reads maxmemory-policy when it gets its client and says, once on
// its logger and in EvictionPolicy, when Redis may evict the limiter's
// state: under every allkeys-* and volatile-* policy (the limiter's keys
// all have a TTL, so volatile-* evicts them first). An evicted key gives
// its identity a fresh quota, so this is the one setup the store cannot
// make exact.
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
		})
	}
}

// Under noeviction a full Redis refuses the script's writes (OOM): each
// decision then follows its policy's FailureMode, with no panic and no
// hang, and the Store's error says what Redis said.
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
	}
}
