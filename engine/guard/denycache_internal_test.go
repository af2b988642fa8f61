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
	c.store(op, res, 0, int64(time.Millisecond), c.epoch())
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
	c.store(op, res, 0, 0, c.epoch())
	if _, ok := c.lookup(op, int64(30*time.Second)); ok {
		t.Fatal("an entry answered at its T")
	}
	if c.slot(maphash.Bytes(c.seed, op.Quotas[0].Key)).Load() != nil {
		t.Fatal("an expired entry met by a lookup was kept")
	}
}

// A request that may wait for a reserved slot is answered from the cache
// only when the cached delay says its slot begins after its wait: one the
// store could admit with a reservation always asks the store.
func TestDenyCacheNeverAnswersARequestThatCouldWait(t *testing.T) {
	c := newDenyCache()
	q := limitstore.Quota{Key: []byte("p:{t}:feed"), Algorithm: limit.TokenBucket, Limit: 5, WindowMS: 1000, Burst: 1, MaxWaitMS: 2000}
	op := &limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}
	res := &limitstore.Result{N: 1}
	res.Quotas[0] = limitstore.QuotaResult{RetryAfterMS: 2_200, ResetAfterMS: 2_400}
	c.store(op, res, 0, 0, c.epoch()) // a denial: the next slot begins in 2.2 s, past MaxWait
	if _, ok := c.lookup(op, 0); !ok {
		t.Fatal("a request that may not wait was not answered from the cache")
	}
	for _, tc := range []struct {
		wait, at int64 // the Op's wait, ms; the lookup's instant, ms after the denial
		cached   bool
	}{
		{wait: 2000, at: 0, cached: true},    // slot 2.2 s away, wait 2 s
		{wait: 2000, at: 100, cached: true},  // 2.1 s away
		{wait: 2000, at: 199, cached: false}, // about 2 s away: the store may reserve it
		{wait: 2000, at: 500, cached: false}, // 1.7 s away
		{wait: 1000, at: 500, cached: true},  // 1.7 s away, the deadline leaves 1 s
		{wait: 5000, at: 0, cached: true},    // capped by the quota's MaxWait, 2 s
		{wait: 0, at: 1500, cached: true},    // no waiting
	} {
		w := *op
		w.WaitMS = tc.wait
		if _, ok := c.lookup(&w, tc.at*int64(time.Millisecond)); ok != tc.cached {
			t.Errorf("wait %d ms, %d ms after the denial: answered from the cache %v, want %v", tc.wait, tc.at, ok, tc.cached)
		}
	}
}

// A denial whose call began before a Refund or a Reset through the cache
// (drop, dropKeys) is not recorded: the store may have decided before the
// quota was given back.
func TestDenyCacheSkipsADenialThatADropOverlapped(t *testing.T) {
	for name, dropped := range map[string]func(c *denyCache, op *limitstore.Op){
		"refund": func(c *denyCache, op *limitstore.Op) { r := *op; r.Refund = true; c.drop(&r) },
		"reset":  func(c *denyCache, op *limitstore.Op) { c.dropKeys([][]byte{op.Quotas[0].Key}) },
	} {
		t.Run(name, func(t *testing.T) {
			c := newDenyCache()
			op := &limitstore.Op{Cost: 1, N: 1}
			op.Quotas[0] = limitstore.Quota{Key: []byte("p:{t}:a"), Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 60_000}
			res := &limitstore.Result{N: 1}
			res.Quotas[0] = limitstore.QuotaResult{RetryAfterMS: 30_000, ResetAfterMS: 30_000}
			epoch := c.epoch() // the call begins
			dropped(c, op)     // a Refund or a Reset while it waits
			c.store(op, res, 0, 0, epoch)
			if _, ok := c.lookup(op, 0); ok {
				t.Fatal("a denial whose call a drop overlapped was recorded")
			}
			c.store(op, res, 0, 0, c.epoch()) // a call that began after it
			if _, ok := c.lookup(op, 0); !ok {
				t.Fatal("a denial after the drop was not recorded")
			}
		})
	}
}
