package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// StoreEvictionsTotal is the name of the counter NewEvictionsCollector
// exposes.
const StoreEvictionsTotal = "quotagate_store_evictions_total"

// EvictionCounter is implemented by stores that bound their memory by
// removing entries, such as the memory store (memstore.Store): Evictions
// returns the entries removed since the store was created, expired (dead,
// past their time to live) and live (evicted before their time to live to
// make room; each one an identity that starts afresh). It must be safe for
// concurrent use; it is called once per scrape.
type EvictionCounter interface {
	Evictions() (expired, live uint64)
}

// NewEvictionsCollector returns a prometheus.Collector of
// quotagate_store_evictions_total{store,reason}: store is the store's name
// (the store label of quotagate_store_duration_seconds, e.g. "memory"),
// reason is "expired" or "live". Register it on the registry the Observer
// uses:
//
//	reg.MustRegister(promlimit.NewEvictionsCollector("memory", store))
//
// A steadily rising reason="live" means the store's cap is too small for the
// traffic, or a flood of new identities (see docs/observability.md). The
// counts are read from c at each scrape.
func NewEvictionsCollector(store string, c EvictionCounter) prometheus.Collector {
	return &evictionsCollector{
		store: label(store),
		src:   c,
		desc: prometheus.NewDesc(StoreEvictionsTotal,
			"Entries a rate-limit store removed to bound its memory, by store and reason: expired (past their time to live) or live (evicted before it to make room; that identity starts afresh).",
			[]string{"store", "reason"}, nil),
	}
}

type evictionsCollector struct {
	store string
	src   EvictionCounter
	desc  *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *evictionsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: one read of the store's counts.
func (c *evictionsCollector) Collect(ch chan<- prometheus.Metric) {
	expired, live := c.src.Evictions()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(expired), c.store, "expired")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(live), c.store, "live")
}
