package guard

import (
	"hash/maphash"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// A refund through this process drops the cached denials of its keys: the
// quota it gives back may end them early.
func TestDenyCacheRefundDrops(t *testing.T) {
	c := newDenyCache()
	op := &limitstore.Op{Cost: 1, N: 2}
	op.Quotas[0] = limitstore.Quota{Key: []byte("p:{t}:a"), Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 60_000}
	op.Quotas[1] = limitstore.Quota{Key: []byte("p:{t}:b"), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 3_600_000}
	res := &limitstore.Result{N: 2}
	res.Quotas[0] = limitstore.QuotaResult{RetryAfterMS: 30_000, ResetAfterMS: 30_000}
	res.Quotas[1] = limitstore.QuotaResult{Allowed: true, Remaining: 3, ResetAfterMS: 100_000}
	c.store(op, res, 0, int64(time.Millisecond))
	if got, ok := c.lookup(op, int64(time.Second)); !ok || got.Quotas[0].RetryAfterMS != 30_000-999 {
		t.Fatalf("lookup 1 s later: %v %+v; want the denial with 999 ms counted off (from the answer's arrival)", ok, got.Quotas[0])
	}
	other := *op
	other.Quotas[1].Limit = 6
	if _, ok := c.lookup(&other, int64(time.Second)); ok {
		t.Fatal("an Op with other quota numbers was answered from the cache")
	}
	refund := *op
	refund.Refund = true
	c.drop(&refund)
	if _, ok := c.lookup(op, int64(time.Second)); ok {
		t.Fatal("a denial survived a refund of its keys")
	}
	c.store(op, res, 0, 0)
	if _, ok := c.lookup(op, int64(30*time.Second)); ok {
		t.Fatal("an entry answered at its T")
	}
	if c.slot(maphash.Bytes(c.seed, op.Quotas[0].Key)).Load() != nil {
		t.Fatal("an expired entry met by a lookup was kept")
	}
}
