package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/redis/rueidis"
)

// diffSteps is the length of every differential sequence (per algorithm,
// clock mode and backend).
const diffSteps = 10_000

// clockMode is how a differential sequence gets its time.
type clockMode int

const (
	// fakeClock: a pure fake clock, any step (same ms, window boundaries,
	// long gaps, backwards). Only on miniredis, whose TTLs do not count down
	// by themselves, so that Redis-side expiry never runs ahead of the fake
	// clock.
	fakeClock clockMode = iota
	// offsetClock: an injected clock = real time + a monotone random offset,
	// so that it never runs slower than the server's own expiry clock (a key
	// that Redis expires is also dead for the memory store). No backwards
	// steps: after one, only the fake clock says the state still matters.
	offsetClock
	// serverClock: the store reads Redis TIME (the production mode); the
	// memory store is then run at the Result.NowMS Redis reported.
	serverClock
)

func (m clockMode) String() string {
	return [...]string{"fake-clock", "offset-clock", "server-time"}[m]
}

// diffPolicy is one policy of a sequence: Limit per WindowMS (Burst for
// TokenBucket).
type diffPolicy struct{ limit, windowMS, burst int64 }

// diffPolicies picks policies whose TTLs suit the clock mode: on real
// servers with an injected clock, sliding and token-bucket states must live
// at least ~10 s of real time (see offsetClock); with server time, windows
// are short so that real time crosses many boundaries. The largest ones sit
// at the engine's 2^53 exactness bound.
func diffPolicies(alg limit.Algorithm, mode clockMode) []diffPolicy {
	switch mode {
	case fakeClock:
		if alg == limit.TokenBucket {
			// miniredis keeps TTLs as time.Duration: at most ~292 years, so
			// the largest bucket here refills in 273 years (the real servers
			// get one at the 2^51 ms bound).
			return []diffPolicy{{10, 1000, 10}, {1, 1, 1}, {5, 60_000, 20}, {1, 86_400_000, 100_000}}
		}
		return []diffPolicy{{10, 1000, 0}, {3, 7, 0}, {1, 1, 0}, {26_000_000, 86_400_000, 0}}
	case offsetClock:
		switch alg {
		case limit.TokenBucket:
			return []diffPolicy{{1, 10_000, 1}, {10, 100_000, 10}, {5, 60_000, 20}, {1, 86_400_000, 26_000_000}}
		case limit.FixedWindow: // the 1 s grace covers short windows
			return []diffPolicy{{10, 1000, 0}, {3, 7, 0}, {1, 1, 0}, {26_000_000, 86_400_000, 0}}
		}
		return []diffPolicy{{10, 10_000, 0}, {3, 60_000, 0}, {1, 10_000, 0}, {26_000_000, 86_400_000, 0}}
	}
	// Server time: a key sees a call every millisecond or so.
	switch alg {
	case limit.TokenBucket:
		return []diffPolicy{{50, 100, 10}, {10, 20, 5}, {1, 1, 3}}
	case limit.FixedWindow:
		return []diffPolicy{{20, 30, 0}, {8, 15, 0}, {3, 10, 0}}
	}
	return []diffPolicy{{20, 50, 0}, {8, 20, 0}, {3, 10, 0}}
}

// diffKey is one (policy, identity) of a sequence.
type diffKey struct {
	op  limit.Op // everything but Key and Cost
	key string
}

func diffKeys(rng *rand.Rand, prefix string, alg limit.Algorithm, pols []diffPolicy) []diffKey {
	var keys []diffKey
	for _, p := range pols {
		op := limit.Op{Algorithm: alg, Limit: p.limit, WindowMS: p.windowMS}
		if alg == limit.TokenBucket {
			op.Burst = p.burst
			op.IntervalMS = p.windowMS / p.limit
		}
		bucket := fmt.Sprintf("%dp%dms", p.limit, p.windowMS)
		for id := range 3 {
			k := diffKey{op: op, key: opKey(prefix, bucket, alg, fmt.Sprintf("id%d", id))}
			k.op.Hash = fnv64(k.key)
			if alg != limit.TokenBucket && id > 0 { // id0: aligned windows
				k.op.PhaseMS = rng.Int64N(p.windowMS)
			}
			keys = append(keys, k)
		}
	}
	return keys
}

// diffDelta is the clock step before a call on k at now: often none (same
// ms), small steps, exactly around k's next window boundary, long gaps
// (the state expires) and, when allowed, a step backwards.
func diffDelta(rng *rand.Rand, k *diffKey, now int64, backwards bool) int64 {
	w := k.op.WindowMS
	switch r := rng.IntN(100); {
	case r < 35:
		return 0
	case r < 65:
		return 1 + rng.Int64N(max(w/10, 1))
	case r < 80:
		idx := floorDivTest(now-k.op.PhaseMS, w)
		next := (idx+1)*w + k.op.PhaseMS
		return max(next-now+rng.Int64N(3)-1, 0)
	case r < 90:
		return 1 + rng.Int64N(3*w)
	case r < 95:
		return 2*w + rng.Int64N(5*w)
	default:
		if backwards {
			return -(1 + rng.Int64N(max(w/2, 1)))
		}
		return 0
	}
}

func floorDivTest(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// diffCost is mostly 1, sometimes anything up to the capacity, sometimes
// the never-admissible capacity+1 the engine clamps to, and (when zero is
// allowed) 0.
func diffCost(rng *rand.Rand, op *limit.Op, zero bool) int64 {
	capacity := op.Limit
	if op.Algorithm == limit.TokenBucket {
		capacity = op.Burst
	}
	switch r := rng.IntN(100); {
	case r < 55:
		return 1
	case r < 75:
		return 1 + rng.Int64N(min(capacity, 5))
	case r < 85:
		return 1 + rng.Int64N(capacity)
	case r < 90:
		return capacity
	case r < 95:
		return capacity + 1
	default:
		if zero {
			return 0
		}
		return 1
	}
}

// runDifferential drives one random sequence through the Redis store and
// the memory store and fails at the first Result that differs in any field.
// Afterwards it checks the TTL invariant on every key the sequence wrote.
func runDifferential(t *testing.T, be *backend, alg limit.Algorithm, mode clockMode) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	prefix := testPrefix(t)
	keys := diffKeys(rng, prefix, alg, diffPolicies(alg, mode))

	var cur int64 // the step's clock reading, Unix ms
	clock := func() time.Time { return time.UnixMilli(cur) }
	client := be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	var rs *Store
	var err error
	if mode == serverClock {
		rs, err = New(client)
	} else {
		rs, err = New(client, WithClock(clock))
	}
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}

	// A realistic epoch for the fake clocks, aligned so that window
	// boundaries of every policy are reachable.
	base := time.Now().UnixMilli()
	start := time.Now()
	var offset int64
	cur = base
	bounds := make(map[string]int64, len(keys))
	type step struct {
		i    int
		key  string
		op   limit.Op
		now  int64
		want limit.Result
	}
	var recent [6]step
	var allowed, denied, backSteps int
	ctx := ctxT(t)
	for i := range diffSteps {
		k := &keys[rng.IntN(len(keys))]
		switch mode {
		case fakeClock:
			d := diffDelta(rng, k, cur, true)
			if d < 0 {
				backSteps++
			}
			cur += d
		case offsetClock:
			offset += diffDelta(rng, k, cur, false)
			cur = base + time.Since(start).Milliseconds() + offset
		}
		op := k.op
		op.Key = []byte(k.key)
		op.Cost = diffCost(rng, &op, mode == fakeClock)
		got, err := rs.Take(ctx, &op)
		if err != nil {
			t.Fatalf("step %d: redis Take: %v", i, err)
		}
		if mode == serverClock {
			cur = got.NowMS
		}
		want, _ := ms.Take(ctx, &op)
		if got != want {
			var hist strings.Builder
			for j := range recent {
				s := recent[(i+j)%len(recent)]
				if s.key != "" {
					fmt.Fprintf(&hist, "\n  step %d now %d key %s cost %d -> %+v", s.i, s.now, s.key, s.op.Cost, s.want)
				}
			}
			t.Fatalf("%v %v step %d (now %d, cost %d, key %s, op %+v):\n redis  %+v\n memory %+v\nrecent steps:%s",
				alg, mode, i, cur, op.Cost, k.key, k.op, got, want, hist.String())
		}
		recent[i%len(recent)] = step{i, k.key, op, cur, want}
		if got.Allowed {
			allowed++
			// After a backwards step the delays and the TTL count from the
			// real now (Result.shift): the state may live longer than the
			// policy's bound, by the skew.
			bounds[k.key] = max(ttlBound(&op), got.TTLMS)
			if mode != fakeClock {
				bounds[k.key] = ttlBound(&op)
			}
		} else {
			denied++
		}
	}
	t.Logf("%v %v: %d steps identical (%d allowed, %d denied, %d backwards clock steps)", alg, mode, diffSteps, allowed, denied, backSteps)
	if allowed < diffSteps/20 || denied < diffSteps/20 {
		t.Errorf("sequence too one-sided to prove anything: %d allowed, %d denied", allowed, denied)
	}
	if mode == fakeClock && backSteps == 0 {
		t.Errorf("no backwards clock step in %d steps", diffSteps)
	}
	n := checkTTLs(t, client, prefix, bounds, mode == serverClock)
	if mode != serverClock && n == 0 {
		t.Errorf("TTL invariant: no key found under %s:* after the sequence", prefix)
	}
	t.Logf("TTL invariant held on %d keys", n)
}

// deleteKeys removes the keys a test wrote (real servers outlive tests).
func deleteKeys(t testing.TB, c rueidis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range scanKeys(t, c, prefix) {
		c.Do(ctx, c.B().Del().Key(k).Build())
	}
}

var algorithms = []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.TokenBucket}

// TestDifferential: the same random sequences give identical Results, field
// by field, on the memory store and on Redis (miniredis, a real standalone
// server, a real 3-master Cluster), for all three algorithms, with costs,
// window boundaries and a fake clock; on real servers also with server TIME.
func TestDifferential(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		modes := []clockMode{fakeClock}
		if be.real {
			modes = []clockMode{offsetClock, serverClock}
		}
		for _, mode := range modes {
			for _, alg := range algorithms {
				t.Run(mode.String()+"/"+alg.String(), func(t *testing.T) {
					runDifferential(t, be, alg, mode)
				})
			}
		}
	})
}
