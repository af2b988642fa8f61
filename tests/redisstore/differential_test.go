package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
	. "github.com/quotagate/quotagate/stores/redis"
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
// at least ~10 s of real time, or a token bucket keep a second of slack
// (see offsetClock); with server time, windows are short so that real time
// crosses many boundaries. The largest ones sit at the engine's bounds:
// 4*Limit*Window near 2^53 for the window algorithms; for the token bucket
// Burst*Window near 2^50 (1<<20 per second, Burst 2^50/1000) and a refill
// time of MaxRefill (1 per day, Burst 365). Token-bucket rates need not
// divide their window (3 per second, 7 per minute).
func diffPolicies(alg limit.Algorithm, mode clockMode) []diffPolicy {
	switch mode {
	case fakeClock:
		if alg == limit.TokenBucket {
			return []diffPolicy{{10, 1000, 10}, {1, 1, 1}, {5, 60_000, 20}, {3, 1000, 3}, {7, 60_000, 7},
				{1, 86_400_000, 365}, {1 << 20, 1000, 1_125_899_906_842}, {1, 31_622_400_000, 1}}
		}
		return []diffPolicy{{10, 1000, 0}, {3, 7, 0}, {1, 1, 0}, {26_000_000, 86_400_000, 0}, {71_000, 31_622_400_000, 0}}
	case offsetClock:
		switch alg {
		case limit.TokenBucket:
			return []diffPolicy{{1, 10_000, 1}, {10, 100_000, 10}, {5, 60_000, 20}, {3, 1000, 3}, {7, 60_000, 7},
				{1, 86_400_000, 365}, {1 << 20, 1000, 1_125_899_906_842}, {1, 31_622_400_000, 1}}
		case limit.FixedWindow: // the 1 s grace covers short windows
			return []diffPolicy{{10, 1000, 0}, {3, 7, 0}, {1, 1, 0}, {26_000_000, 86_400_000, 0}, {71_000, 31_622_400_000, 0}}
		}
		return []diffPolicy{{10, 10_000, 0}, {3, 60_000, 0}, {1, 10_000, 0}, {26_000_000, 86_400_000, 0}, {71_000, 31_622_400_000, 0}}
	}
	// Server time: a key sees a call every millisecond or so.
	switch alg {
	case limit.TokenBucket:
		return []diffPolicy{{50, 100, 10}, {10, 20, 5}, {1, 1, 3}, {3, 10, 3}, {7, 20, 4}}
	case limit.FixedWindow:
		return []diffPolicy{{20, 30, 0}, {8, 15, 0}, {3, 10, 0}}
	}
	return []diffPolicy{{20, 50, 0}, {8, 20, 0}, {3, 10, 0}}
}

// diffKey is one identity of a sequence: an Op of one to three quotas
// (policies of the sequence) whose keys share one hash tag.
type diffKey struct {
	op limitstore.Op // everything but Cost
}

func diffKeys(rng *rand.Rand, prefix string, algs []limit.Algorithm, mode clockMode) []diffKey {
	type pol struct {
		alg limit.Algorithm
		p   diffPolicy
	}
	var pols []pol
	for _, alg := range algs {
		for _, p := range diffPolicies(alg, mode) {
			pols = append(pols, pol{alg, p})
		}
	}
	var keys []diffKey
	for pi := range pols {
		for id := range 3 {
			name := fmt.Sprintf("id%d-%d", pi, id)
			tag := hashTag(name)
			k := diffKey{op: limitstore.Op{N: 1}}
			if id == 2 { // several quotas, all or nothing
				k.op.N = 2 + rng.IntN(limitstore.MaxQuotas-1)
			}
			for j := range k.op.N {
				pl := pols[(pi+j*(1+rng.IntN(len(pols))))%len(pols)]
				if j == 0 {
					pl = pols[pi]
				}
				q := limitstore.Quota{Algorithm: pl.alg, Limit: pl.p.limit, WindowMS: pl.p.windowMS}
				if pl.alg == limit.TokenBucket {
					q.Burst = pl.p.burst
				} else if id > 0 { // id0: aligned windows
					q.PhaseMS = rng.Int64N(pl.p.windowMS)
				}
				bucket := fmt.Sprintf("%dp%dms-%d", pl.p.limit, pl.p.windowMS, j)
				q.Key = []byte(taggedKey(prefix, tag, bucket, pl.alg, name))
				k.op.Quotas[j] = q
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
	q := &k.op.Quotas[rng.IntN(k.op.N)]
	w := q.WindowMS
	switch r := rng.IntN(100); {
	case r < 35:
		return 0
	case r < 65:
		return 1 + rng.Int64N(max(w/10, 1))
	case r < 80:
		idx := floorDivTest(now-q.PhaseMS, w)
		next := (idx+1)*w + q.PhaseMS
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

// diffCost is mostly 1, sometimes anything up to the (smallest) capacity,
// sometimes the never-admissible capacity+1 the engine clamps to, and (when
// zero is allowed) 0.
func diffCost(rng *rand.Rand, op *limitstore.Op, zero bool) int64 {
	capacity := int64(1 << 62)
	for i := range op.N {
		q := &op.Quotas[i]
		if q.Algorithm == limit.TokenBucket {
			capacity = min(capacity, q.Burst)
		} else {
			capacity = min(capacity, q.Limit)
		}
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

// runDifferential drives one random sequence (Ops of one to four quotas,
// refunds of earlier charges) through the Redis store and the memory store
// and fails at the first Result that differs in any field. Afterwards it
// checks the TTL invariant on every key the sequence wrote.
func runDifferential(t *testing.T, be *backend, algs []limit.Algorithm, mode clockMode) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	prefix := testPrefix(t)
	keys := diffKeys(rng, prefix, algs, mode)

	var cur int64 // the step's clock reading, Unix ms
	clock := func() time.Time { return time.UnixMilli(cur) }
	client := be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	var rs *Store
	var err error
	if mode == serverClock {
		rs, err = New(client, WithoutGuard())
	} else {
		rs, err = New(client, WithClock(clock), WithoutGuard())
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
		op   limitstore.Op
		now  int64
		want limitstore.Result
	}
	var recent [6]step
	var charges []limitstore.Op
	var allowed, denied, refunds, backSteps int
	// expiry is each key's expiry as last written (fake clock), high the
	// highest clock reading so far.
	expiry := make(map[string]int64)
	var high int64
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
		op.Cost = diffCost(rng, &op, mode == fakeClock)
		if len(charges) > 0 && rng.IntN(8) == 0 {
			op = charges[rng.IntN(len(charges))]
			op.Refund = true
		}
		if mode == fakeClock {
			// Once the clock has passed a state's expiry the memory store
			// may reclaim it (Redis drops an expired key by its own clock
			// too), so behind that expiry the two stores may disagree: the
			// fake clock never reads a key there, it moves up to the expiry.
			for j := range op.N {
				if e, ok := expiry[string(op.Quotas[j].Key)]; ok && e <= high && cur < e {
					cur = e
				}
			}
			high = max(high, cur)
		}
		got, err := takeOne(rs, &op)
		if err != nil {
			t.Fatalf("step %d: redis Take: %v", i, err)
		}
		if mode == serverClock {
			cur = got.NowMS
		}
		want, _ := takeOne(ms, &op)
		if got != want {
			var hist strings.Builder
			for j := range recent {
				s := recent[(i+j)%len(recent)]
				if s.op.N > 0 {
					fmt.Fprintf(&hist, "\n  step %d now %d op %+v -> %+v", s.i, s.now, s.op, s.want)
				}
			}
			t.Fatalf("%v %v step %d (now %d, op %+v):\n redis  %+v\n memory %+v\nrecent steps:%s",
				algs, mode, i, cur, op, got, want, hist.String())
		}
		recent[i%len(recent)] = step{i, op, cur, want}
		switch {
		case op.Refund:
			refunds++
		case got.Allowed:
			allowed++
			c := op
			for j := range c.N {
				c.Quotas[j].Window = got.Quotas[j].Window
			}
			c.Cost = rng.Int64N(c.Cost + 1)
			charges = append(charges[:min(len(charges), 64)], c)
		default:
			denied++
		}
		for j := range op.N {
			if ttl := got.Quotas[j].TTLMS; ttl > 0 && !op.Refund {
				expiry[string(op.Quotas[j].Key)] = cur + ttl
			}
		}
		for j := range op.N {
			if ttl := got.Quotas[j].TTLMS; ttl > 0 && !op.Refund {
				q := &op.Quotas[j]
				b := ttlBound(q)
				if mode == fakeClock {
					// After a backwards step the delays and the TTL count
					// from the real now: a state may live longer than the
					// policy's bound, by the skew.
					b = max(bounds[string(q.Key)], keyBound(q, ttl))
				}
				bounds[string(q.Key)] = b
			}
		}
	}
	t.Logf("%v %v: %d steps identical (%d allowed, %d denied, %d refunds, %d backwards clock steps)",
		algs, mode, diffSteps, allowed, denied, refunds, backSteps)
	if allowed < diffSteps/20 || denied < diffSteps/20 || refunds < diffSteps/40 {
		t.Errorf("sequence too one-sided to prove anything: %d allowed, %d denied, %d refunds", allowed, denied, refunds)
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
// server, a real 3-master Cluster), for each algorithm and for Ops mixing
// them, with several quotas, refunds, costs, window boundaries and a fake
// clock that also steps back; on real servers also with server TIME.
func TestDifferential(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		modes := []clockMode{fakeClock}
		if be.real {
			modes = []clockMode{offsetClock, serverClock}
		}
		for _, mode := range modes {
			for _, alg := range algorithms {
				t.Run(mode.String()+"/"+alg.String(), func(t *testing.T) {
					runDifferential(t, be, []limit.Algorithm{alg}, mode)
				})
			}
			t.Run(mode.String()+"/mixed", func(t *testing.T) {
				runDifferential(t, be, algorithms, mode)
			})
		}
	})
}
