package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// ttlOps returns one op per algorithm (60 s windows) for identity id.
func ttlOps(prefix, id string) []limit.Op {
	ops := []limit.Op{
		{Algorithm: limit.SlidingWindow, Limit: 10, WindowMS: 60_000, PhaseMS: 1234, Cost: 1},
		{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 60_000, PhaseMS: 4321, Cost: 1},
		{Algorithm: limit.TokenBucket, Limit: 10, Burst: 10, WindowMS: 60_000, IntervalMS: 6000, Cost: 1},
	}
	for i := range ops {
		k := opKey(prefix, "10p60", ops[i].Algorithm, id)
		ops[i].Key, ops[i].Hash = []byte(k), fnv64(k)
	}
	return ops
}

// takeRetry calls Take until it succeeds (the first call after the
// connections were killed may fail) or 10 s pass.
func takeRetry(t *testing.T, s *Store, op *limit.Op) limit.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := s.Take(ctx, op)
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
		s, err := New(client)
		if err != nil {
			t.Fatal(err)
		}
		bounds := map[string]int64{}
		for round, id := range []string{"before", "across"} {
			for _, op := range ttlOps(prefix, id) {
				if res := takeRetry(t, s, &op); !res.Allowed {
					t.Fatalf("%s: first call denied: %+v", op.Key, res)
				}
				bounds[string(op.Key)] = ttlBound(&op)
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

// TestTTLRepairsSeededKey: a key found without a TTL (pre-seeded by hand)
// gets one from the next call, whether that call is denied (the state is
// full), allowed, or finds a state it cannot parse.
func TestTTLRepairsSeededKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		now := time.Now().UnixMilli()
		s, err := New(client, WithClock(func() time.Time { return time.UnixMilli(now) }))
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
		far := i64(now + 3_600_000)
		// full returns the stored value of a full state for op at now.
		full := func(op *limit.Op) string {
			switch op.Algorithm {
			case limit.TokenBucket:
				return i64(now+op.Burst*op.IntervalMS) + " " + far
			case limit.FixedWindow:
				return i64(floorDivTest(now-op.PhaseMS, op.WindowMS)) + " " + i64(op.Limit) + " " + far
			}
			return i64(floorDivTest(now-op.PhaseMS, op.WindowMS)) + " " + i64(op.Limit) + " 0 " + far
		}
		cases := []struct {
			name  string
			value func(op *limit.Op) string
			allow bool
		}{
			{"full-state-denied", full, false},
			{"expired-state-allowed", func(op *limit.Op) string {
				f := full(op)
				return f[:strings.LastIndexByte(f, ' ')+1] + i64(now-1) // expiry: 1 ms ago
			}, true},
			{"garbage-allowed", func(*limit.Op) string { return "x 1 2" }, true},
		}
		bounds := map[string]int64{}
		for _, tc := range cases {
			for _, op := range ttlOps(prefix, tc.name) {
				k := string(op.Key)
				if err := client.Do(ctx, client.B().Set().Key(k).Value(tc.value(&op)).Build()).Error(); err != nil {
					t.Fatalf("seed %s: %v", k, err)
				}
				if p := pttl(t, client, k); p != -1 {
					t.Fatalf("seeded %s has PTTL %d, want -1 (no TTL)", k, p)
				}
				res, err := s.Take(ctx, &op)
				if err != nil {
					t.Fatalf("%s %v: %v", tc.name, op.Algorithm, err)
				}
				if res.Allowed != tc.allow {
					t.Errorf("%s %v: Allowed %v, want %v (%+v)", tc.name, op.Algorithm, res.Allowed, tc.allow, res)
				}
				bounds[k] = ttlBound(&op)
			}
		}
		if n := checkTTLs(t, client, prefix, bounds, false); n != len(bounds) {
			t.Errorf("found %d keys, want %d", n, len(bounds))
		}
	})
}
