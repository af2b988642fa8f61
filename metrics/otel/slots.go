package otellimit

import (
	limit "github.com/quotagate/quotagate/engine"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// SlotsInFlight is the up-down counter of the Concurrency slots this
// process's requests hold, by bucket. Refusals of a full identity are
// quotagate.requests{outcome=limited} of the same bucket.
const SlotsInFlight = "quotagate.concurrency.slots_in_flight"

var _ limit.SlotObserver = (*Observer)(nil)

// newSlots creates the SlotsInFlight instrument on m.
func newSlots(m metric.Meter) (metric.Int64UpDownCounter, error) {
	return m.Int64UpDownCounter(SlotsInFlight, metric.WithUnit("{slot}"),
		metric.WithDescription("Concurrency slots held by this process's requests in flight, by bucket (sum over processes: the fleet's). Refusals are quotagate.requests{outcome=limited} of the bucket."))
}

// Slots implements limit.SlotObserver: it adds delta to the bucket's
// quotagate.concurrency.slots_in_flight.
func (o *Observer) Slots(bucket string, delta int64) {
	opts, ok := o.slotCache.get(bucket)
	if !ok {
		b := label(bucket)
		opts = o.slotCache.put(b, addOpts(attribute.String("bucket", b)))
	}
	o.slots.Add(bg, delta, opts...)
}
