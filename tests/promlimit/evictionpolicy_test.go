package promlimit_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

type policyReader struct {
	policy string
	evicts bool
}

func (p policyReader) EvictionPolicy() (string, bool) { return p.policy, p.evicts }

// The gauge is 1 under a policy that may evict the limiter's state, 0
// otherwise, labelled with the policy from Redis's closed set ("unknown"
// when unread, "other" for anything else).
func TestEvictionPolicyCollector(t *testing.T) {
	for _, tc := range []struct {
		in    policyReader
		label string
		value string
	}{
		{policyReader{"allkeys-lru", true}, "allkeys-lru", "1"},
		{policyReader{"volatile-ttl", true}, "volatile-ttl", "1"},
		{policyReader{"noeviction", false}, "noeviction", "0"},
		{policyReader{"", false}, "unknown", "0"},
		{policyReader{"made-up\xff", true}, "other", "1"},
	} {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(promlimit.NewEvictionPolicyCollector("redis", tc.in))
		want := `# HELP quotagate_store_may_evict 1 when the rate-limit store's server may evict the limiter's state under its memory policy (each evicted key gives its client a fresh quota), else 0; by store and the server's policy.
# TYPE quotagate_store_may_evict gauge
quotagate_store_may_evict{policy="` + tc.label + `",store="redis"} ` + tc.value + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), promlimit.StoreMayEvict); err != nil {
			t.Errorf("%+v: %v", tc.in, err)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	}
}
