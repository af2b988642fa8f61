package limit

import "github.com/quotagate/quotagate/engine/limitstore"

// op builds the Op of one decision in sc: one store key per quota of set
// (the plan's quotas for (bucket, id), all in one hash tag) and their
// numbers, at cost. It is the one function that knows the shape of Op. over
// reports a cost above a quota's capacity, which no wait admits: the engine
// answers it without the store, op then has no keys, and quota is the index
// of the first quota the cost exceeds.
func (l *Limiter) op(sc *scratch, bucket *bucketRef, id *who, set *quotaSet, cost int64) (op *limitstore.Op, over bool, quota int) {
	op = &sc.op
	op.Refund, op.Peek, op.N, op.Cost, op.WaitMS = false, false, set.n, cost, 0
	a := l.policy.Algorithm
	for i := range set.n {
		s, q := &set.q[i], &op.Quotas[i]
		if cost > s.capacity(a) {
			return op, true, i
		}
		q.Algorithm, q.Limit, q.WindowMS, q.Burst, q.Window, q.MaxWaitMS = a, s.limit, s.windowMS, s.burst, 0, l.maxWaitMS
	}
	sc.key = l.keys.appendKeys(sc.key[:0], bucket, id, set, op)
	l.blockRule(sc, bucket, id, set, op)
	if l.calendar {
		l.calendarWindows(op, set)
	}
	return op, false, 0
}
