package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"
	limit "github.com/quotagate/quotagate/engine"
)

// SlotsInFlight is the gauge of the Concurrency slots this process's
// requests hold, by bucket. Refusals of a full identity are
// quotagate_requests_total{outcome="limited"} of the same bucket.
const SlotsInFlight = "quotagate_concurrency_slots_in_flight"

var _ limit.SlotObserver = (*Observer)(nil)

// newSlots is the gauge vector of SlotsInFlight.
func newSlots() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: SlotsInFlight,
		Help: "Concurrency slots held by this process's requests in flight, by bucket (sum over processes: the fleet's). Refusals are quotagate_requests_total{outcome=\"limited\"} of the bucket.",
	}, []string{"bucket"})
}

// Slots implements limit.SlotObserver: it adds delta to the bucket's
// quotagate_concurrency_slots_in_flight.
func (o *Observer) Slots(bucket string, delta int64) {
	g, ok := o.slotCache.get(bucket)
	if !ok {
		b := label(bucket)
		var err error
		var gauge prometheus.Gauge
		if gauge, err = o.slots.GetMetricWithLabelValues(b); err != nil {
			return
		}
		g = o.slotCache.put(b, gauge)
	}
	g.Add(float64(delta))
}
