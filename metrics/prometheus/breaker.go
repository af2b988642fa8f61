package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names of the store-side protections (circuit breaker, local deny
// cache), as exposed.
const (
	StoreSkippedTotal      = "quotagate_store_skipped_total"
	StoreBreakerOpen       = "quotagate_store_breaker_open"
	StoreBreakerOpensTotal = "quotagate_store_breaker_opens_total"
)

// storeSide holds the metrics of decisions a store did not make.
type storeSide struct {
	skipped   *prometheus.CounterVec
	open      *prometheus.GaugeVec
	opens     *prometheus.CounterVec
	skipCache cache[skipKey, prometheus.Counter]
}

type skipKey struct{ store, reason string }

func newStoreSide() storeSide {
	return storeSide{
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: StoreSkippedTotal,
			Help: "Decisions of a store that does I/O that were made without calling it, by store and reason: deny-cache (the local deny cache repeated the store's own denial) or breaker-open (the store's circuit breaker is open; the failure mode decided).",
		}, []string{"store", "reason"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: StoreBreakerOpen,
			Help: "1 while the store's circuit breaker is open (the store is not called; one probe call every 250 ms), 0 once it closed again.",
		}, []string{"store"}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: StoreBreakerOpensTotal,
			Help: "Times the store's circuit breaker opened (the store answered nothing for a whole store timeout, or failed 5 calls in a row).",
		}, []string{"store"}),
	}
}

// StoreEvent counts one decision made without calling the store in
// quotagate_store_skipped_total (events "deny-cache" and "breaker-open",
// the reason label), or records a transition of a store's circuit breaker
// (events "opened" and "closed"): quotagate_store_breaker_open is set to 1
// or 0, and an opening counts in quotagate_store_breaker_opens_total. The
// first transition of a store also creates its opens counter at 0 when it
// closes (so that increase() sees the next opening).
func (o *Observer) StoreEvent(store, event string) {
	if event == "opened" || event == "closed" {
		o.breaker(store, event == "opened")
		return
	}
	k := skipKey{store, event}
	c, ok := o.side.skipCache.get(k)
	if !ok {
		k = skipKey{label(store), label(event)}
		var err error
		if c, err = o.side.skipped.GetMetricWithLabelValues(k.store, k.reason); err != nil {
			c = dropped
		} else {
			c = o.side.skipCache.put(k, c)
		}
	}
	c.Inc()
}

func (o *Observer) breaker(store string, open bool) {
	store = label(store)
	g, err := o.side.open.GetMetricWithLabelValues(store)
	if err != nil {
		return
	}
	c, err := o.side.opens.GetMetricWithLabelValues(store)
	if err != nil {
		return
	}
	if open {
		g.Set(1)
		c.Inc()
		return
	}
	g.Set(0)
}

// register registers the three metrics on reg (see New).
func (s *storeSide) register(reg prometheus.Registerer, done *[]prometheus.Collector) error {
	var err error
	if s.skipped, err = register(reg, StoreSkippedTotal, s.skipped, done); err != nil {
		return err
	}
	if s.open, err = register(reg, StoreBreakerOpen, s.open, done); err != nil {
		return err
	}
	s.opens, err = register(reg, StoreBreakerOpensTotal, s.opens, done)
	return err
}
