package memstore_test

import (
	"context"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// TestResetMovesLiveKeysToTheNextEpoch: a Peek adds no entry and changes
// no count; Reset gives exactly the live keys given the empty State of the
// next epoch, keeping their expiry (absent ones are no error, a second
// Reset moves the epoch on), the identity starts afresh, a refund of a
// charge made before the Reset gives nothing back, and a reset entry dies
// at its expiry.
func TestResetMovesLiveKeysToTheNextEpoch(t *testing.T) {
	ctx := context.Background()
	clock := limittest.NewClock(time.UnixMilli(1_767_225_600_000))
	s, err := memstore.New(memstore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	op := func(id string) *limitstore.Op {
		o := &limitstore.Op{Cost: 1, N: 2}
		o.Quotas[0] = limitstore.Quota{Key: []byte("t:{" + id + "}:b:2p60f:r:" + id), Algorithm: limit.FixedWindow, Limit: 2, WindowMS: 60_000}
		o.Quotas[1] = limitstore.Quota{Key: []byte("t:{" + id + "}:b:9p3600:r:" + id), Algorithm: limit.SlidingWindow, Limit: 9, WindowMS: 3_600_000}
		return o
	}
	peek := func(id string) limitstore.Result {
		o := op(id)
		o.Peek = true
		res, err := limittest.Take(ctx, s, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := peek("a"); !res.Allowed || s.Len() != 0 {
		t.Fatalf("Peek of a fresh identity: %+v, %d entries", res, s.Len())
	}
	for _, id := range []string{"a", "a", "b"} {
		if _, err := limittest.Take(ctx, s, op(id)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if res := peek("a"); res.Allowed || res.Quotas[0].Remaining != 0 || s.Len() != 4 {
			t.Fatalf("Peek of a spent identity: %+v, %d entries", res, s.Len())
		}
	}
	a := op("a")
	keys := [][]byte{a.Quotas[0].Key, a.Quotas[1].Key, []byte("t:{a}:absent")}
	for epoch := range int64(2) {
		if err := s.Reset(ctx, keys); err != nil {
			t.Fatal(err)
		}
		// a's entries stay, holding the empty State of the next epoch
		// (until their own expiry); the absent key stays absent.
		res := peek("a")
		if s.Len() != 4 || !res.Allowed || res.Quotas[0].Remaining != 1 || res.Quotas[0].Epoch != epoch+1 || res.Quotas[1].Epoch != epoch+1 {
			t.Fatalf("after Reset %d: %+v, %d entries, want a whole quota of epoch %d and 4 entries", epoch+1, res, s.Len(), epoch+1)
		}
	}
	charge, err := limittest.Take(ctx, s, op("a"))
	if err != nil || !charge.Allowed || charge.Quotas[0].Remaining != 1 || charge.Quotas[0].Epoch != 2 {
		t.Fatalf("a after Reset: %+v, %v, want a whole quota", charge, err)
	}
	if res, _ := limittest.Take(ctx, s, op("b")); !res.Allowed || res.Quotas[0].Remaining != 0 || res.Quotas[0].Epoch != 0 {
		t.Fatalf("b after a's Reset: %+v, want its count kept", res)
	}
	// A refund of a charge of an earlier epoch gives nothing back; one of
	// this epoch does.
	refund := func(epoch int64) limitstore.Result {
		o := op("a")
		o.Refund = true
		for i := range o.N {
			o.Quotas[i].Window, o.Quotas[i].Epoch = charge.Quotas[i].Window, epoch
		}
		res, err := limittest.Take(ctx, s, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := refund(0); res.Quotas[0].Remaining != 1 || res.Quotas[1].Remaining != 8 {
		t.Fatalf("refund of epoch 0 in epoch 2: %+v, want nothing given back", res)
	}
	if res := refund(2); res.Quotas[0].Remaining != 2 || res.Quotas[1].Remaining != 9 {
		t.Fatalf("refund of epoch 2 in epoch 2: %+v, want the charge given back", res)
	}
	// A reset entry dies at its expiry, epoch and all: a decision after it
	// is of epoch 0, and a Reset of an expired entry removes it.
	clock.Advance(2*time.Hour + time.Second)
	if res := peek("a"); res.Quotas[0].Epoch != 0 || res.Quotas[1].Epoch != 0 {
		t.Fatalf("Peek after the expiry: %+v, want epoch 0", res)
	}
	if err := s.Reset(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("%d entries after a Reset of expired entries, want b's 2", s.Len())
	}
	if res, _ := limittest.Take(ctx, s, op("a")); res.Quotas[0].Epoch != 0 {
		t.Fatalf("a after its entries expired: %+v, want epoch 0", res)
	}
}
