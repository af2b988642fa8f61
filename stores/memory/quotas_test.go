package memstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// op returns an Op of cost 1 over quotas, one per key.
func op(q limitstore.Quota, keys ...string) limitstore.Op {
	o := limitstore.Op{Cost: 1, N: len(keys)}
	for i, k := range keys {
		o.Quotas[i] = q
		o.Quotas[i].Key = []byte(k)
	}
	return o
}

func take(t *testing.T, s *memstore.Store, o limitstore.Op) limitstore.Result {
	t.Helper()
	res, err := s.Take(context.Background(), &o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The quotas of one Op are decided together, all or nothing, also under
// contention: with quotas of 10 and 5 on one identity, 100 concurrent
// requests admit exactly 5, and the 10-quota holds exactly those 5. Keys
// with different hash tags (which the engine never sends) lock both shards.
func TestQuotasOfOneOpAreAtomic(t *testing.T) {
	for name, keys := range map[string][2]string{
		"one-tag":  {"qg:{id}:a:f:r:x", "qg:{id}:b:f:r:x"},
		"two-tags": {"qg:{a}:a:f:r:x", "qg:{b}:b:f:r:x"},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			both := op(limitstore.Quota{Algorithm: limit.FixedWindow, WindowMS: 60_000}, keys[0], keys[1])
			both.Quotas[0].Limit, both.Quotas[1].Limit = 10, 5
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() {
					if take(t, s, both).Allowed {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if allowed.Load() != 5 {
				t.Fatalf("%d admitted, want 5", allowed.Load())
			}
			first := op(limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 60_000}, keys[0])
			if r := take(t, s, first); !r.Allowed || r.Quotas[0].Remaining != 4 {
				t.Fatalf("the 10-quota after 5 admissions: %+v, want allowed with 4 left", r.Quotas[0])
			}
		})
	}
}

// A refund never creates an entry and never extends one's expiry.
func TestRefundNeverCreatesOrExtends(t *testing.T) {
	s, clock := newStore(t)
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 2, WindowMS: 10_000}
	refund := op(q, "qg:{r}:b:f:r:x")
	refund.Refund = true
	take(t, s, refund)
	if n := s.Len(); n != 0 {
		t.Fatalf("a refund of a key never written created %d entries", n)
	}
	charge := op(q, "qg:{r}:b:f:r:x")
	res := take(t, s, charge)
	exp := res.NowMS + res.Quotas[0].TTLMS
	take(t, s, charge) // quota used up
	clock.Advance(5 * time.Second)
	refund.Quotas[0].Window = res.Quotas[0].Window
	if r := take(t, s, refund); r.Quotas[0].Remaining != 1 {
		t.Fatalf("after a refund of 1: %+v, want 1 left", r.Quotas[0])
	}
	if r := take(t, s, charge); !r.Allowed {
		t.Fatalf("the refunded unit was not given back: %+v", r)
	}
	// The entry dies when it was going to, refund or not: still held 1 ms
	// before its expiry, reclaimed at it by the next decision in its shard
	// (this refund, which creates nothing).
	clock.Advance(time.Duration(exp-1-clock.Now().UnixMilli()) * time.Millisecond)
	take(t, s, refund)
	before := evictionsOf(s)
	if n := s.Len(); n != 1 || before.Expired != 0 {
		t.Fatalf("1 ms before its expiry: Len %d, Evictions %+v; want the entry held", n, before)
	}
	clock.Advance(time.Millisecond)
	take(t, s, refund)
	if ev := evictionsOf(s); s.Len() != 0 || ev.Expired != 1 {
		t.Fatalf("at its expiry: Len %d, Evictions %+v; want it reclaimed, not extended by the refunds", s.Len(), ev)
	}
}

// At the cap, making room for a new quota never evicts another quota of the
// same Op: with 4 entries per shard (MaxKeys 256) and Ops of 4 quotas on one
// hash tag, each Op's 4 entries replace the previous Op's 4.
func TestEvictionSparesTheOpsOtherQuotas(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(256))
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 1, WindowMS: 60_000}
	for i := range 50 {
		id := string(rune('a' + i%26))
		four := op(q, "qg:{t}:1:"+id, "qg:{t}:2:"+id, "qg:{t}:3:"+id, "qg:{t}:4:"+id)
		four.Cost = 0 // keep every quota whole: nothing ranks the new ones worse
		if !take(t, s, four).Allowed {
			t.Fatalf("Op %d denied", i)
		}
		four.Cost = 1
		if r := take(t, s, four); !r.Allowed {
			t.Fatalf("Op %d: one of its quotas was evicted while it was written: %+v", i, r)
		}
		if r := take(t, s, four); r.Allowed {
			t.Fatalf("Op %d: a quota of 1 admitted twice: an entry of the Op was lost", i)
		}
	}
}
