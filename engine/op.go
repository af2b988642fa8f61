package limit

// op builds the Op of one decision in sc: the store key of (bucket, id) and
// the policy's numbers for cost. It is the one function that knows the
// shape of Op. limit is the quota per window the decision reports (the
// fallback bucket's is tightened); over reports a cost above the capacity,
// which no wait admits: the engine answers it without the store, and op
// then has no key.
func (l *Limiter) op(sc *scratch, bucket *bucketRef, id *who, cost int64) (op *Op, limit int64, over bool) {
	op = &sc.op
	*op = Op{
		Algorithm:  l.policy.Algorithm,
		Limit:      l.res.limit,
		Burst:      l.res.burst,
		WindowMS:   l.res.windowMS,
		IntervalMS: l.res.intervalMS,
		Cost:       cost,
	}
	if id.src == KeySourceFallback {
		op.Limit, op.Burst = l.fallback.limit, l.fallback.burst
	}
	capacity := op.Limit
	if op.Algorithm == TokenBucket {
		capacity = op.Burst
	}
	if op.Cost > capacity {
		return op, op.Limit, true
	}
	sc.key, op.Hash, op.PhaseMS = l.keys.appendKey(sc.key[:0], bucket, id)
	op.Key = sc.key
	return op, op.Limit, false
}
