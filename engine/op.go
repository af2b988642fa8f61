package limit

// op builds the Op of one decision in sc: the store key of (bucket, id) and
// the policy's numbers for cost. It is the one function that knows the
// shape of Op. limit is the quota per window the decision reports (the
// fallback bucket's is tightened).
func (l *Limiter) op(sc *scratch, bucket *bucketRef, id *who, cost int64) (op *Op, limit int64) {
	op = &sc.op
	op.Refund, op.N = false, 1
	q := &op.Quotas[0]
	q.Algorithm, q.Limit, q.WindowMS, q.Burst, q.Window = l.policy.Algorithm, l.res.limit, l.res.windowMS, l.res.burst, 0
	if id.src == KeySourceFallback {
		// Tightened, but never below the policy's Cost: a capacity under it
		// would limit every request without a client address for ever.
		if q.Algorithm == TokenBucket {
			q.Burst = max(l.res.cost, q.Burst/l.cfg.fallbackDivisor)
		} else {
			q.Limit = max(l.res.cost, q.Limit/l.cfg.fallbackDivisor)
		}
	}
	op.Cost = min(cost, q.capacity()+1) // above capacity: limited; keeps products exact
	sc.key, q.PhaseMS = l.keys.appendKey(sc.key[:0], bucket, id)
	q.Key = sc.key
	return op, q.Limit
}
