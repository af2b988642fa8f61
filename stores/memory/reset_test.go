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

// TestResetRemovesTheKeysAndPeekWritesNothing: a Peek adds no entry and
// changes no count; Reset removes exactly the keys given (absent ones are
// no error, a second Reset is a no-op), and the identity starts afresh.
func TestResetRemovesTheKeysAndPeekWritesNothing(t *testing.T) {
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
		res, err := s.Take(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := peek("a"); !res.Allowed || s.Len() != 0 {
		t.Fatalf("Peek of a fresh identity: %+v, %d entries", res, s.Len())
	}
	for _, id := range []string{"a", "a", "b"} {
		if _, err := s.Take(ctx, op(id)); err != nil {
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
	for range 2 {
		if err := s.Reset(ctx, keys); err != nil {
			t.Fatal(err)
		}
		if s.Len() != 2 {
			t.Fatalf("%d entries after Reset, want b's 2", s.Len())
		}
	}
	if res, _ := s.Take(ctx, op("a")); !res.Allowed || res.Quotas[0].Remaining != 1 {
		t.Fatalf("a after Reset: %+v, want a whole quota", res)
	}
	if res, _ := s.Take(ctx, op("b")); !res.Allowed || res.Quotas[0].Remaining != 0 {
		t.Fatalf("b after a's Reset: %+v, want its count kept", res)
	}
}
