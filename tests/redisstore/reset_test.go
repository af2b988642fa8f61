package redisstore_test

import (
	"encoding/binary"
	"github.com/quotagate/quotagate/engine/limittest"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

// storedValue reads key's value as the store's integers: five for a value
// of 40 bytes, six (the epoch last) for one of 48.
func storedValue(t *testing.T, c rueidis.Client, key string) []int64 {
	t.Helper()
	v, err := c.Do(ctxT(t), c.B().Get().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if len(v) != 40 && len(v) != 48 {
		t.Fatalf("%s holds %d bytes, want 40 or 48", key, len(v))
	}
	var out []int64
	for i := 0; i < len(v); i += 8 {
		out = append(out, int64(binary.LittleEndian.Uint64([]byte(v[i:i+8]))))
	}
	return out
}

// TestResetMovesValuesOfBothLayoutsToTheNextEpoch: a value of the 40-byte
// layout (what every version before epochs wrote, and what the store still
// writes for a key never reset) is read as epoch 0 and decided on as it
// stands, and a write keeps it 40 bytes; a refund of its charge gives the
// charge back. A Reset writes the 48-byte empty state of epoch 1 in its
// place, keeping its expiry, the key's deadline and its PTTL; writes keep
// the epoch; a refund of the charge taken before the Reset gives nothing
// back, one of a charge after it does; a second Reset moves to epoch 2. A
// Reset of an expired state, and of a block record, deletes the key. On
// miniredis, a real server and a Cluster, for every algorithm.
func TestResetMovesValuesOfBothLayoutsToTheNextEpoch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s, client, prefix, now := frozenStore(t, be)
		ctx := ctxT(t)
		for _, op := range ttlOps(prefix, "layout") {
			t.Run(op.Quotas[0].Algorithm.String(), func(t *testing.T) {
				q := &op.Quotas[0]
				k := string(q.Key)
				// The previous layout's value: 3 taken, dead in 50 s, the
				// key's deadline with it.
				st := [5]int64{floorDivTest(now-q.PhaseMS, q.WindowMS), 3, 0, now + 50_000, now + 50_000}
				if q.Algorithm == limit.TokenBucket {
					st[0], st[1] = now+3*q.WindowMS/q.Limit, 0 // 3 tokens taken
				}
				if err := client.Do(ctx, client.B().Set().Key(k).Value(encodeState(st)).Px(50*time.Second).Build()).Error(); err != nil {
					t.Fatal(err)
				}
				take := func(o limitstore.Op) limitstore.Result {
					t.Helper()
					res, err := limittest.Take(ctx, s, &o)
					if err != nil {
						t.Fatal(err)
					}
					return res
				}
				refundOf := func(res limitstore.Result) limitstore.Op {
					r := op
					r.Refund, r.Quotas[0].Window, r.Quotas[0].Epoch = true, res.Quotas[0].Window, res.Quotas[0].Epoch
					return r
				}
				res := take(op)
				if !res.Allowed || res.Quotas[0].Remaining != 6 || res.Quotas[0].Epoch != 0 {
					t.Fatalf("a Take on the 40-byte value: %+v, want admitted with 6 left, epoch 0", res.Quotas[0])
				}
				if v := storedValue(t, client, k); len(v) != 5 {
					t.Fatalf("after a Take: %v, want the 40-byte layout kept", v)
				}
				if r := take(refundOf(res)); r.Quotas[0].Remaining != 7 {
					t.Fatalf("a refund of epoch 0 on the 40-byte value: %+v, want the charge given back (7 left)", r.Quotas[0])
				}
				old := take(op) // charged before the Reset
				before := storedValue(t, client, k)
				ttl := pttl(t, client, k)
				if err := s.Reset(ctx, [][]byte{q.Key}); err != nil {
					t.Fatal(err)
				}
				v := storedValue(t, client, k)
				if len(v) != 6 || v[0] != 0 || v[1] != 0 || v[2] != 0 || v[3] != before[3] || v[4] != before[4] || v[5] != 1 {
					t.Fatalf("after the Reset: %v (before %v), want the empty state of epoch 1 with the expiry and deadline kept", v, before)
				}
				if p := pttl(t, client, k); p <= 0 || p > ttl {
					t.Fatalf("PTTL %d after the Reset, %d before: want it kept", p, ttl)
				}
				res = take(op)
				if !res.Allowed || res.Quotas[0].Remaining != 9 || res.Quotas[0].Epoch != 1 {
					t.Fatalf("a Take after the Reset: %+v, want a whole quota less one, epoch 1", res.Quotas[0])
				}
				if v := storedValue(t, client, k); len(v) != 6 || v[5] != 1 {
					t.Fatalf("after a Take of epoch 1: %v, want the epoch kept", v)
				}
				if r := take(refundOf(old)); r.Quotas[0].Remaining != 9 {
					t.Fatalf("a refund of a charge before the Reset: %+v, want nothing given back (9 left)", r.Quotas[0])
				}
				if r := take(refundOf(res)); r.Quotas[0].Remaining != 10 {
					t.Fatalf("a refund of a charge after the Reset: %+v, want it given back (10 left)", r.Quotas[0])
				}
				if err := s.Reset(ctx, [][]byte{q.Key}); err != nil {
					t.Fatal(err)
				}
				if v := storedValue(t, client, k); v[5] != 2 {
					t.Fatalf("after a second Reset: %v, want epoch 2", v)
				}
			})
		}
		// An expired state (its key kept alive by hand) and a block
		// record are deleted.
		dead, block := prefix+":{x}:dead", prefix+":{x}:block"
		if err := client.Do(ctx, client.B().Set().Key(dead).Value(encodeState([5]int64{1, 2, 0, now - 1, now + 60_000})).Px(time.Minute).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := client.Do(ctx, client.B().Set().Key(block).Value(string(make([]byte, 16))).Px(time.Minute).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(ctx, [][]byte{[]byte(dead), []byte(block), []byte(prefix + ":{x}:absent")}); err != nil {
			t.Fatal(err)
		}
		if n, err := client.Do(ctx, client.B().Exists().Key(dead, block).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("%d of the dead state and the block record left after the Reset (%v), want none", n, err)
		}
	})
}
