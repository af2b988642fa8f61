package limit

// op builds the Op of one decision in sc: the store key of (bucket, id) and
// the policy's numbers for cost. It is the one function that knows the
// shape of Op. limit is the quota per window the decision reports (the
// fallback bucket's is tightened); over reports a cost above the capacity,
// which no wait admits: the engine answers it without the store, and op
// then has no key.
func (l *Limiter) op(sc *scratch, bucket *bucketRef, id *who, cost int64) (op *Op, limit int64, over bool) {
	op = &sc.op
	op.Refund, op.N = false, 1
	q := &op.Quotas[0]
	q.Algorithm, q.Limit, q.WindowMS, q.Burst, q.Window = l.policy.Algorithm, l.res.limit, l.res.windowMS, l.res.burst, 0
	if id.src == KeySourceFallback {
		q.Limit, q.Burst = l.fallback.limit, l.fallback.burst
	}
	if cost > q.capacity() {
		return op, q.Limit, true
	}
	op.Cost = cost
	sc.key, q.PhaseMS = l.keys.appendKey(sc.key[:0], bucket, id)
	q.Key = sc.key
	return op, q.Limit, false
}
