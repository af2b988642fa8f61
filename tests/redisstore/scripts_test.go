package redisstore_test

import (
	"encoding/binary"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"reflect"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// TestRegressionPlainLuaCodecReadsNegativeIntegers: the script's integers
// are struct's '<i8', signed. A stored value of the store's format (40
// bytes, live expiry) holding a negative integer (written by something
// else) must read the same on every server: as the Store's Go side reads
// it (le64, signed) and as struct.unpack does on Redis. The plain-Lua codec
// used where the server's Lua has no struct library (miniredis) read every
// integer as unsigned: a TAT of -1 became 2^64 - 1 (a full bucket: the
// script denied, the engine admitted: ErrBadReply), a window index of -1 a
// window far ahead (read as the current one, its count counted), a count of
// -3 a huge count (denied: ErrBadReply). Each case, alone and with a second
// quota (the general path's decoding), must give the engine's Result on
// those states and store the engine's new states.
func TestRegressionPlainLuaCodecReadsNegativeIntegers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s, client, prefix, now := frozenStore(t, be)
		ctx := ctxT(t)
		sliding := limitstore.Quota{Algorithm: limit.SlidingWindow, Limit: 10, WindowMS: 60_000, PhaseMS: 1234}
		fixed := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 60_000, PhaseMS: 4321}
		bucket := limitstore.Quota{Algorithm: limit.TokenBucket, Limit: 10, Burst: 10, WindowMS: 60_000}
		idx := func(q limitstore.Quota) int64 { return floorDivTest(now-q.PhaseMS, q.WindowMS) }
		live := now + 3_600_000
		cases := []struct {
			name  string
			q     limitstore.Quota
			state [3]int64 // a, b, c
		}{
			{"bucket-negative-tat", bucket, [3]int64{-1, 0, 0}},
			{"bucket-negative-tat-far", bucket, [3]int64{-now, 3, 0}},
			{"sliding-negative-window", sliding, [3]int64{-1, 5, 2}},
			{"fixed-negative-window", fixed, [3]int64{-1, 5, 0}},
			{"fixed-negative-count", fixed, [3]int64{idx(fixed), -3, 0}},
			{"sliding-negative-prev", sliding, [3]int64{idx(sliding), 1, -4}},
		}
		for _, tc := range cases {
			for _, n := range []int{1, 2} {
				name := fmt.Sprintf("%s/quotas=%d", tc.name, n)
				tag := hashTag(name)
				op := limitstore.Op{Cost: 1, N: n}
				op.Quotas[0] = tc.q
				op.Quotas[0].Key = []byte(taggedKey(prefix, tag, "neg", tc.q.Algorithm, name))
				if n == 2 {
					op.Quotas[1] = sliding
					op.Quotas[1].Key = []byte(taggedKey(prefix, tag, "neg", sliding.Algorithm, name+":other"))
				}
				k := string(op.Quotas[0].Key)
				v := encodeState([5]int64{tc.state[0], tc.state[1], tc.state[2], live, live})
				if err := client.Do(ctx, client.B().Set().Key(k).Value(v).Build()).Error(); err != nil {
					t.Fatal(err)
				}
				// The engine on the states the Go side reads (signed).
				var sts [limitstore.MaxQuotas]limitstore.State
				if tc.q.Algorithm == limit.TokenBucket {
					sts[0].TAT, sts[0].TATFrac = tc.state[0], tc.state[1]
				} else {
					sts[0].Window, sts[0].Count, sts[0].Prev = tc.state[0], tc.state[1], tc.state[2]
				}
				want := op.Apply(&sts, now)
				res, err := limittest.Take(ctx, s, &op)
				if err != nil {
					t.Errorf("%s: %v; want %+v", name, err, want)
					continue
				}
				if !reflect.DeepEqual(res, want) {
					t.Errorf("%s: %+v; want the engine's %+v", name, res, want)
				}
				if want.Quotas[0].TTLMS == 0 {
					continue
				}
				got, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString()
				if err != nil || len(got) != 40 {
					t.Fatalf("%s: stored %x (%v), want 40 bytes", name, got, err)
				}
				var a, b, c int64
				if tc.q.Algorithm == limit.TokenBucket {
					a, b = sts[0].TAT, sts[0].TATFrac
				} else {
					a, b, c = sts[0].Window, sts[0].Count, sts[0].Prev
				}
				g := func(i int) int64 { return int64(binary.LittleEndian.Uint64([]byte(got[8*i:]))) }
				if g(0) != a || g(1) != b || g(2) != c || g(3) != now+want.Quotas[0].TTLMS {
					t.Errorf("%s: stored %d %d %d expiry %d; want the engine's %d %d %d expiry %d",
						name, g(0), g(1), g(2), g(3), a, b, c, now+want.Quotas[0].TTLMS)
				}
			}
		}
	})
}
