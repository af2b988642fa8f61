package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

var algorithms = []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}

// decider decides one call of cost 1 for an identity.
type decider func(t *testing.T, id []byte) bool

// viaEngine decides through a Limiter (Consume).
func viaEngine(l *limit.Limiter) decider {
	return func(t *testing.T, id []byte) bool {
		d, err := l.Consume(context.Background(), string(id))
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
}

// viaStore decides with Take on s directly, for a 3-per-hour quota of alg,
// one key per identity (the identity is its hash tag, as the engine's keys
// have one per identity): the store's path is the engine's, at a fraction
// of the cost under -race.
func viaStore(s *memstore.Store, alg limit.Algorithm) decider {
	key := make([]byte, 0, 64)
	op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: alg, Limit: 3, Burst: 3, WindowMS: 3_600_000}}}
	return func(t *testing.T, id []byte) bool {
		key = append(append(append(key[:0], "qg:{"...), id...), "}:3p3600:r:k"...)
		op.Quotas[0].Key = key
		res, err := s.Take(context.Background(), &op)
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
}

// lockOut makes each of victims identities use up a 3-per-hour quota (the
// 4th call is denied) and fails the test if it is not.
func lockOut(t *testing.T, d decider, victims int) {
	t.Helper()
	for v := range victims {
		for i := range 4 {
			if got := d(t, victimID(v)); got != (i < 3) {
				t.Fatalf("victim %d, call %d: allowed %v", v, i+1, got)
			}
		}
	}
}

func victimID(v int) []byte { return strconv.AppendInt([]byte("victim-"), int64(v), 10) }

// stillDenied counts the victims denied on one more call.
func stillDenied(t *testing.T, d decider, victims int) int {
	t.Helper()
	n := 0
	for v := range victims {
		if !d(t, victimID(v)) {
			n++
		}
	}
	return n
}

// flood makes n identities never seen before call once each.
func flood(t *testing.T, d decider, n int) {
	t.Helper()
	id := make([]byte, 0, 32)
	for i := range n {
		id = strconv.AppendInt(append(id[:0], "flood-"...), int64(i), 10)
		if !d(t, id) {
			t.Fatalf("flood identity %d denied", i)
		}
	}
}

// Issue 12: 200 clients over their limit, then 10 x MaxKeys new identities
// (each making one call): at least 99% of the 200 are still denied, whatever
// the algorithm, with a small store and with the default one. The small
// store is driven through the engine; the default one (2.6 million
// decisions) through Take directly, which -race slows ten times less.
func TestFloodKeepsLimitedClientsLimited(t *testing.T) {
	const victims = 200
	for _, alg := range algorithms {
		for _, maxKeys := range []int{1024, memstore.DefaultMaxKeys} {
			t.Run(fmt.Sprintf("%v/MaxKeys=%d", alg, maxKeys), func(t *testing.T) {
				t.Parallel()
				// a clock that stands still (the flood takes no time) and
				// takes no lock, which -race makes costly
				s, err := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithClock(func() time.Time { return epoch }))
				if err != nil {
					t.Fatal(err)
				}
				d := viaStore(s, alg)
				if maxKeys == 1024 {
					d = viaEngine(limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: 3, Window: time.Hour}))
				}
				lockOut(t, d, victims)
				flood(t, d, 10*maxKeys)
				if n := s.Len(); n != maxKeys {
					t.Errorf("Len %d after the flood, want the cap %d", n, maxKeys)
				}
				ev := evictionsOf(s)
				if want := uint64(10*maxKeys + victims - maxKeys); ev.Live+ev.Expired != want {
					t.Errorf("Evictions %+v, want %d in all", ev, want)
				}
				denied := stillDenied(t, d, victims)
				if denied*100 < victims*99 {
					t.Fatalf("%d of %d locked-out clients still denied after the flood, want >= 99%%", denied, victims)
				}
				t.Logf("%d of %d still denied; evictions %+v", denied, victims, ev)
			})
		}
	}
}

// C-02: memstore WithMaxKeys(1024); FixedWindow 3 per hour; 200 identities
// consume 4 each (the 4th denied); then 3 000 other identities consume once:
// at least 99% of the 200 are still denied (most were re-admitted: eviction
// picked an arbitrary live entry).
func TestC02EvictionKeepsLimitedClientsLimited(t *testing.T) {
	s, _ := newStore(t, memstore.WithMaxKeys(1024))
	d := viaEngine(limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour}))
	lockOut(t, d, 200)
	flood(t, d, 3000)
	denied := stillDenied(t, d, 200)
	if denied < 198 {
		t.Fatalf("%d of 200 locked-out clients still denied, want >= 198", denied)
	}
	t.Logf("%d of 200 still denied", denied)
	if ev := evictionsOf(s); ev.Live == 0 {
		t.Fatalf("Evictions %+v: the flood into a full store evicted nothing live", ev)
	}
}

// Issue 12: expired entries are reclaimed without waiting for the cap, and
// without a goroutine: after 100 000 one-off clients whose windows have all
// ended, Len() returns to (near) zero within a bounded number of further
// decisions, here all for one identity (the worst case: one shard's traffic
// must sweep all 64).
func TestSweepReclaimsExpiredEntries(t *testing.T) {
	const clients = 100_000
	s, clock := newStore(t, memstore.WithMaxKeys(1<<20))
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second})
	d := viaEngine(l)
	flood(t, d, clients)
	if n := s.Len(); n < clients*9/10 {
		t.Fatalf("Len %d right after %d clients: entries were dropped while live", n, clients)
	}
	clock.Advance(3 * time.Second) // every window and its 1 s grace are over
	// The documented bound: entries/2 + 4 096 decisions.
	const bound = clients/2 + 4096
	ops := 0
	for ; s.Len() > 1; ops++ {
		if ops == bound {
			t.Fatalf("Len %d after %d further decisions for one identity, want <= 1", s.Len(), ops)
		}
		clock.Advance(time.Millisecond)
		d(t, []byte("regular"))
	}
	t.Logf("%d expired entries reclaimed in %d decisions (bound %d)", clients, ops, bound)
	if ev := evictionsOf(s); ev.Expired < clients-1 || ev.Live != 0 {
		t.Fatalf("Evictions %+v, want %d expired, 0 live", ev, clients)
	}
}
