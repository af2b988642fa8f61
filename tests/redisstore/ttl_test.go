package redisstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
)

// ttlOps returns one one-quota op per algorithm (60 s windows) for
// identity id.
func ttlOps(prefix, id string) []limitstore.Op {
	qs := []limitstore.Quota{
		{Algorithm: limit.SlidingWindow, Limit: 10, WindowMS: 60_000, PhaseMS: 1234},
		{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 60_000, PhaseMS: 4321},
		{Algorithm: limit.TokenBucket, Limit: 10, Burst: 10, WindowMS: 60_000},
	}
	ops := make([]limitstore.Op, len(qs))
	for i, q := range qs {
		ops[i] = oneQuota(opKey(prefix, "10p60", q.Algorithm, id), q, 1)
	}
	return ops
}

// takeRetry calls Take until it succeeds (the first call after the
// connections were killed may fail) or 10 s pass.
func takeRetry(t *testing.T, s *Store, op *limitstore.Op) limitstore.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := limittest.Take(ctx, s, op)
		cancel()
		if err == nil {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("Take still failing after 10 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // waiting for a reconnect, not timing anything
	}
}

// TestTTLAfterKilledConnections: keys written before and after every client
// connection is dropped between two calls all carry 0 < PTTL <= bound.
func TestTTLAfterKilledConnections(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		s, err := New(client, WithoutGuard())
		if err != nil {
			t.Fatal(err)
		}
		bounds := map[string]int64{}
		for round, id := range []string{"before", "across"} {
			for _, op := range ttlOps(prefix, id) {
				if res := takeRetry(t, s, &op); !res.Allowed {
					t.Fatalf("%s: first call denied: %+v", op.Quotas[0].Key, res)
				}
				bounds[string(op.Quotas[0].Key)] = ttlBound(&op.Quotas[0])
			}
			if round == 0 {
				be.killConns(t)
			}
		}
		// A second call on the "before" keys, after the connection died.
		for _, op := range ttlOps(prefix, "before") {
			takeRetry(t, s, &op)
		}
		if n := checkTTLs(t, client, prefix, bounds, false); n != len(bounds) {
			t.Errorf("found %d keys, want %d", n, len(bounds))
		}
	})
}

// encodeState is a stored value as the script writes it: five
// little-endian 64-bit integers.
func encodeState(v [5]int64) string {
	var b [40]byte
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return string(b[:])
}

// TestForeignValuesGetADeadline: a key holding a value the store did not
// write, without a TTL (set by hand, or by an older version of the store),
// is no state when it does not decode, and the next write gives the key a
// deadline within the policy's bound; so does a value of the store's own
// format whose recorded deadline is beyond the bound. (A denial writes
// nothing, so the store never repairs a key it only reads: every key it
// writes has a TTL.)
func TestForeignValuesGetADeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s, client, prefix, now := frozenStore(t, be)
		ctx := ctxT(t)
		cases := []struct {
			name  string
			value func(op *limitstore.Op) string
		}{
			{"garbage", func(*limitstore.Op) string { return "x 1 2" }},
			{"garbage-40-bytes", func(*limitstore.Op) string { return strings.Repeat("\xa5", 40) }},
			{"version-1-decimal", func(op *limitstore.Op) string { return "1 2 " + strconv.FormatInt(now+3_600_000, 10) }},
			{"wrong-length", func(*limitstore.Op) string { return strings.Repeat("\x01", 39) }},
			{"own-format-far-deadline", func(op *limitstore.Op) string {
				// An empty state alive for an hour, recorded deadline in a year.
				q := &op.Quotas[0]
				a := floorDivTest(now-q.PhaseMS, q.WindowMS)
				if q.Algorithm == limit.TokenBucket {
					a = now - 1
				}
				return encodeState([5]int64{a, 0, 0, now + 3_600_000, now + 365*86_400_000})
			}},
		}
		bounds := map[string]int64{}
		for _, tc := range cases {
			for _, op := range ttlOps(prefix, tc.name) {
				k := string(op.Quotas[0].Key)
				if err := client.Do(ctx, client.B().Set().Key(k).Value(tc.value(&op)).Build()).Error(); err != nil {
					t.Fatalf("seed %s: %v", k, err)
				}
				if p := pttl(t, client, k); p != -1 {
					t.Fatalf("seeded %s has PTTL %d, want -1 (no TTL)", k, p)
				}
				res, err := limittest.Take(ctx, s, &op)
				if err != nil {
					t.Fatalf("%s %v: %v", tc.name, op.Quotas[0].Algorithm, err)
				}
				if !res.Allowed || res.Quotas[0].Remaining != 9 {
					t.Errorf("%s %v: want a fresh state's answer, got %+v", tc.name, op.Quotas[0].Algorithm, res)
				}
				bounds[k] = ttlBound(&op.Quotas[0])
			}
		}
		if n := checkTTLs(t, client, prefix, bounds, false); n != len(bounds) {
			t.Errorf("found %d keys, want %d", n, len(bounds))
		}
	})
}

// A key's deadline in Redis (server TIME) is at most the state's own time
// to live plus 1 s of grace, for every algorithm; a token bucket's key in
// particular lives at most its time to full plus the grace (5 per 60 s,
// one request taken: full after 12 s, so PTTL <= 13 s). A second request
// (a write in place) keeps that bound.
func TestKeyDeadlineWithinStateLifePlusGrace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		s, err := New(client, WithoutGuard())
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range algorithms {
			q := limitstore.Quota{Algorithm: alg, Limit: 5, Burst: 5, WindowMS: 60_000, PhaseMS: 777}
			if alg == limit.TokenBucket {
				q.PhaseMS = 0
			}
			op := oneQuota(opKey(prefix, "5p60", alg, "grace"), q, 1)
			k := string(op.Quotas[0].Key)
			for i := range 2 {
				res, err := limittest.Take(ctxT(t), s, &op)
				if err != nil || !res.Allowed {
					t.Fatalf("%v #%d: %+v %v", alg, i+1, res, err)
				}
				ttl, p := res.Quotas[0].TTLMS, pttl(t, client, k)
				if p <= 0 || p > ttl+1000 {
					t.Errorf("%v #%d: PTTL %d ms, want 0 < PTTL <= the state's %d ms + 1000", alg, i+1, p, ttl)
				}
				if alg == limit.TokenBucket && p > 12_000*int64(i+1)+1000 {
					t.Errorf("token bucket after %d requests: PTTL %d ms, want at most its time to full (%d ms) + 1000", i+1, p, 12_000*(i+1))
				}
			}
		}
	})
}

// A key that lost its deadline (PERSIST from outside) gets one back from
// the next write, whichever path writes it: a first-window admission, a
// count-only write in place, an Op of two quotas, a refund.
func TestWriteRepairsKeyWithoutDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		s, err := New(client, WithoutGuard())
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		persist := func(k string) {
			t.Helper()
			if err := client.Do(ctx, client.B().Persist().Key(k).Build()).Error(); err != nil {
				t.Fatalf("PERSIST %s: %v", k, err)
			}
			if p := pttl(t, client, k); p != -1 {
				t.Fatalf("PERSIST %s: PTTL %d, want -1", k, p)
			}
		}
		check := func(what string, q *limitstore.Quota) {
			t.Helper()
			if p, b := pttl(t, client, string(q.Key)), ttlBound(q); p <= 0 || p > b {
				t.Errorf("%v %s: PTTL %d ms after the write, want 0 < PTTL <= %d", q.Algorithm, what, p, b)
			}
		}
		for _, alg := range algorithms {
			q := limitstore.Quota{Algorithm: alg, Limit: 100, Burst: 100, WindowMS: 60_000, PhaseMS: 99}
			if alg == limit.TokenBucket {
				q.PhaseMS = 0
			}
			one := oneQuota(opKey(prefix, "100p60", alg, "one"), q, 1)
			res, err := limittest.Take(ctx, s, &one)
			if err != nil || !res.Allowed {
				t.Fatalf("%v: %+v %v", alg, res, err)
			}
			persist(string(one.Quotas[0].Key))
			if res, err = limittest.Take(ctx, s, &one); err != nil || !res.Allowed {
				t.Fatalf("%v: %+v %v", alg, res, err)
			}
			check("one quota", &one.Quotas[0])

			two := one
			two.N = 2
			two.Quotas[1] = q
			two.Quotas[1].Key = []byte(taggedKey(prefix, hashTag("100p60\x00one"), "100p60b", alg, "one"))
			if res, err = limittest.Take(ctx, s, &two); err != nil || !res.Allowed {
				t.Fatalf("%v two quotas: %+v %v", alg, res, err)
			}
			persist(string(two.Quotas[0].Key))
			persist(string(two.Quotas[1].Key))
			charged := two
			for j := range two.N {
				charged.Quotas[j].Window = res.Quotas[j].Window
			}
			if res, err = limittest.Take(ctx, s, &two); err != nil || !res.Allowed {
				t.Fatalf("%v two quotas: %+v %v", alg, res, err)
			}
			check("two quotas", &two.Quotas[0])
			check("two quotas", &two.Quotas[1])

			persist(string(two.Quotas[0].Key))
			charged.Refund = true
			if res, err = limittest.Take(ctx, s, &charged); err != nil || !res.Allowed {
				t.Fatalf("%v refund: %+v %v", alg, res, err)
			}
			check("refund", &two.Quotas[0])
		}
	})
}

// A flight's write in place repairs a key that lost its deadline too,
// whether the flight checks each key (4 keys: fewer than 8) or asks the
// server once whether any key lacks one (13 keys: 8 or more), for every
// algorithm; a flight on keys that all have one leaves them as they are.
func TestFlightRepairsKeyWithoutDeadline(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		for _, size := range []int{3, 12} {
			for _, alg := range algorithms {
				t.Run(fmt.Sprintf("%v/%d", alg, size), func(t *testing.T) {
					prefix, client, s, g := countingStore(t, be)
					ctx := ctxT(t)
					q := limitstore.Quota{Algorithm: alg, Limit: 100, Burst: 100, WindowMS: 60_000}
					ops := make([]limitstore.Op, size)
					for i := range ops {
						ops[i] = oneQuota(opKey(prefix, "100p60", alg, strconv.Itoa(i)), q, 1)
						if res, err := limittest.Take(ctx, s, &ops[i]); err != nil || !res.Allowed {
							t.Fatalf("%+v %v", res, err)
						}
					}
					lost := string(ops[size/2].Quotas[0].Key)
					if err := client.Do(ctx, client.B().Persist().Key(lost).Build()).Error(); err != nil {
						t.Fatal(err)
					}
					r := startGated(t, s, g, prefix+":fill")
					var chs []chan outcome
					for i := range ops {
						// No deadline: a queued Take with one arms the flush
						// timer, which sends the queue 1 ms on while the calls
						// out are held, splitting the flight on a loaded machine.
						ch, queued := r.start(context.Background(), &ops[i])
						if !queued {
							// The queue flushed early (a loaded machine's timing): this
							// run does not exercise one flight of these Ops.
							r.releaseAll()
							for _, ch := range append(chs, ch) {
								r.wait(ch)
							}
							t.Skipf("!!! an Op was sent alone, not queued for the flight: the flight path did not run this time (%d of %d queued)", i, len(ops))
						}
						chs = append(chs, ch)
					}
					r.releaseAll()
					for _, ch := range chs {
						if o := r.wait(ch); o.err != nil || !o.res.Allowed {
							t.Fatalf("%+v %v", o.res, o.err)
						}
					}
					if !slices.Contains(g.batchCalls(), size+1) { // the filler that queued first, then ops
						t.Fatalf("script calls of %v Ops, want one flight of %d", g.batchCalls(), size+1)
					}
					for i := range ops {
						if p, b := pttl(t, client, string(ops[i].Quotas[0].Key)), ttlBound(&ops[i].Quotas[0]); p <= 0 || p > b {
							t.Errorf("key %d (lost its deadline: %v): PTTL %d after the flight, want 0 < PTTL <= %d", i, i == size/2, p, b)
						}
					}
				})
			}
		}
	})
}
