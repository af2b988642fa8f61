package otellimit

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Blocked is the name of the counter of requests a block limited.
const Blocked = "quotagate.blocked_requests"

type blockKey struct{ bucket, plan string }

// blockSide is quotagate.blocked_requests{bucket,plan}: the requests a block
// (limit.Policy.BlockFor) limited, each also counted limited (or
// shadow-limited) in quotagate.requests.
type blockSide struct {
	blocked metric.Int64Counter
	cache   cache[blockKey, []metric.AddOption]
}

func (b *blockSide) create(m metric.Meter) (err error) {
	b.blocked, err = m.Int64Counter(Blocked, metric.WithUnit("{request}"),
		metric.WithDescription("Requests limited by a block (Policy.BlockFor: the identity was limited, and stays limited for the block), by bucket and plan; each is also counted limited (shadow-limited under Shadow) in quotagate.requests."))
	return err
}

// inc counts one blocked request of (bucket, plan).
func (b *blockSide) inc(bucket, plan string) {
	k := blockKey{bucket, plan}
	opts, ok := b.cache.get(k)
	if !ok {
		k = blockKey{label(bucket), label(plan)}
		opts = b.cache.put(k, addOpts(attribute.String("bucket", k.bucket), attribute.String("plan", k.plan)))
	}
	b.blocked.Add(bg, 1, opts...)
}
