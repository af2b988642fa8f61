package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// StoreMayEvict is the name of the gauge NewEvictionPolicyCollector
// exposes.
const StoreMayEvict = "quotagate_store_may_evict"

// EvictionPolicyReader is implemented by stores on a server whose memory
// policy may drop their state, such as the Redis store (redisstore.Store):
// EvictionPolicy returns the server's policy as read when the store
// connected ("noeviction", "allkeys-lru", ...; "" when it could not be
// read) and whether the server may evict the limiter's keys under it. It
// must be safe for concurrent use; it is called once per scrape.
type EvictionPolicyReader interface {
	EvictionPolicy() (policy string, evicts bool)
}

// NewEvictionPolicyCollector returns a prometheus.Collector of
// quotagate_store_may_evict{store,policy}: 1 when the store's server may
// evict the limiter's state under its memory policy (every allkeys-* and
// volatile-* policy of Redis: an evicted key gives its client a fresh
// quota), 0 otherwise; store is the store's name (e.g. "redis"), policy
// the server's policy ("unknown" when the store could not read it, "other"
// for a name outside Redis's). Register it on the registry the Observer
// uses:
//
//	reg.MustRegister(promlimit.NewEvictionPolicyCollector("redis", store))
//
// Alert on it being 1 (see docs/observability.md).
func NewEvictionPolicyCollector(store string, r EvictionPolicyReader) prometheus.Collector {
	return &evictionPolicyCollector{
		store: label(store),
		src:   r,
		desc: prometheus.NewDesc(StoreMayEvict,
			"1 when the rate-limit store's server may evict the limiter's state under its memory policy (each evicted key gives its client a fresh quota), else 0; by store and the server's policy.",
			[]string{"store", "policy"}, nil),
	}
}

type evictionPolicyCollector struct {
	store string
	src   EvictionPolicyReader
	desc  *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *evictionPolicyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: one read of the store's policy.
func (c *evictionPolicyCollector) Collect(ch chan<- prometheus.Metric) {
	policy, evicts := c.src.EvictionPolicy()
	policy = limitstore.EvictionPolicyLabel(policy)
	v := 0.0
	if evicts {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, c.store, policy)
}
