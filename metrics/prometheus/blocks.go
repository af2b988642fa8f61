package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// BlockedTotal is the name of the counter of requests a block limited.
const BlockedTotal = "quotagate_blocked_requests_total"

// blockSide is quotagate_blocked_requests_total{bucket,plan}: the requests
// a block (limit.Policy.BlockFor) limited, each also counted limited (or
// shadow-limited) in quotagate_requests_total.
type blockSide struct {
	blocked *prometheus.CounterVec
	cache   cache[blockKey, prometheus.Counter]
}

type blockKey struct{ bucket, plan string }

func newBlockSide() blockSide {
	return blockSide{blocked: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: BlockedTotal,
		Help: "Requests limited by a block (Policy.BlockFor: the identity was limited, and stays limited for the block), by bucket and plan; each is also counted limited (shadow-limited under Shadow) in quotagate_requests_total.",
	}, []string{"bucket", "plan"})}
}

func (b *blockSide) register(reg prometheus.Registerer, done *[]prometheus.Collector) (err error) {
	b.blocked, err = register(reg, BlockedTotal, b.blocked, done)
	return err
}

// inc counts one blocked request of (bucket, plan).
func (b *blockSide) inc(bucket, plan string) {
	k := blockKey{bucket, plan}
	c, ok := b.cache.get(k)
	if !ok {
		k = blockKey{label(bucket), label(plan)}
		var err error
		if c, err = b.blocked.GetMetricWithLabelValues(k.bucket, k.plan); err != nil {
			c = dropped
		} else {
			c = b.cache.put(k, c)
		}
	}
	c.Inc()
}
