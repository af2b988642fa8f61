package limittest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/internal/refmodel"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// BlockRun is how CheckBlocks drives a store.
type BlockRun struct {
	// Set sets the clock the store decides at to ms (Unix ms), or later,
	// and returns the reading it set; CheckBlocks calls it before every
	// call, with readings that only move forward, and decides its models
	// at the reading returned. A store whose keys expire on a real clock
	// (a Redis server) needs a reading that never falls behind real time
	// since the last one (see RealTimeFloor).
	Set func(ms int64) int64
	// Start is the first reading, Unix ms.
	Start int64
	// Options are passed to limit.New (a key prefix for a shared store).
	Options []limit.Option
	// Rounds is the number of policies (0: 24), Steps the calls per policy
	// (0: 300).
	Rounds, Steps int
	// Seed seeds the sequences.
	Seed uint64
	// Scale multiplies every window, block and clock step (0: 1, windows of
	// 1 to 40 ms): a store whose keys expire on a real clock needs its
	// states to outlive a round trip's jitter by far.
	Scale int64
}

// CheckBlocks drives random sequences of ConsumeN, Peek and Reset calls
// through Limiters on s whose policies block (Policy.BlockFor, and BlockMax
// in half of them), with one to MaxQuotas quotas of each algorithm, a
// plan ("pro-" identities) and, in a quarter of them, Shadow, and compares
// every Decision field by field (Allowed, Outcome, Blocked, Cost, Plan,
// Limit, Remaining, ResetAfter, RetryAfter, OverCapacity) with what the
// brute-force models of engine/internal/refmodel say: the quotas' models
// and a block model that keeps the blocks served, sharing no code with
// limitstore.Op.ApplyBlock. Half of the policies count only failures
// (CountStatus, a random Lease): their admitted calls are finished later
// at random, as successes (given back) or failures (counted), or never,
// and the block model keeps the charges unsettled meanwhile (a denial
// begins no block while one is). s must decide at the readings run.Set
// gives, and answer from its own state only (no deny cache on a fake
// clock).
func CheckBlocks(t *testing.T, s limitstore.Store, run BlockRun) {
	t.Helper()
	rounds, steps := run.Rounds, run.Steps
	if rounds == 0 {
		rounds = 24
	}
	if steps == 0 {
		steps = 300
	}
	rng := rand.New(rand.NewPCG(run.Seed, 29))
	scale := max(run.Scale, 1)
	now := run.Start
	algs := []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}
	ctx := context.Background()
	var heldOff, finished int // denials a charge unsettled kept from blocking; calls finished
	for round := range rounds {
		alg := algs[round%3]
		def, pro := blockRates(rng, alg, scale), blockRates(rng, alg, scale)
		p := limit.Policy{Name: fmt.Sprintf("blk%d-%d", run.Seed, round), Algorithm: alg, AlignWindows: true, Quotas: def,
			Plans: map[string][]limit.Rate{"pro": pro},
			Plan: func(r limit.Request) (string, error) {
				if id, _ := r.Native.(string); strings.HasPrefix(id, "pro-") {
					return "pro", nil
				}
				return "", nil
			},
			BlockFor: time.Duration((1+rng.Int64N(40))*scale) * time.Millisecond,
			Shadow:   round%4 == 3,
		}
		if rng.IntN(2) == 0 {
			p.BlockMax = p.BlockFor + time.Duration(rng.Int64N(120)*scale)*time.Millisecond
		}
		counts := round%8 >= 4 // Shadow in one of four of these too
		if counts {
			p.CountStatus = func(status int) bool { return status >= 400 }
			p.Lease = time.Duration((1+rng.Int64N(60))*scale) * time.Millisecond
		}
		l, err := limit.New(s, p, run.Options...)
		if err != nil {
			t.Fatal(err)
		}
		type ident struct {
			rates  []limit.Rate
			models []refmodel.Quota
			block  *refmodel.Block
			plan   string
		}
		ids := map[string]*ident{}
		fresh := func(id string) *ident {
			rs, plan := def, ""
			if strings.HasPrefix(id, "pro-") {
				rs, plan = pro, "pro"
			}
			blk := refmodel.NewBlock(p.BlockFor.Milliseconds(), p.BlockMax.Milliseconds())
			blk.Lease = p.Lease.Milliseconds()
			return &ident{rates: rs, models: blockModels(alg, rs), block: blk, plan: plan}
		}
		for _, id := range []string{"a", "b", "pro-a"} {
			ids[id] = fresh(id)
		}
		// The admitted calls of a policy that counts by status, not yet
		// finished: the Decision, the models it charged (those of before a
		// Reset give nothing back to the identity's new ones) with the
		// windows it counted in, and its charge in the block model.
		type call struct {
			d      limit.Decision
			models []refmodel.Quota
			wins   []int64
			cost   int64
			block  *refmodel.Block
			handle int
		}
		var open []call
		for step := range steps {
			now = run.Set(now + rng.Int64N(30)*scale)
			id := []string{"a", "b", "pro-a"}[rng.IntN(3)]
			m := ids[id]
			var what string
			var got limit.Decision
			var cost int64 = 1
			mutate := true
			switch k := rng.IntN(12); {
			case k == 0:
				if err := l.Reset(ctx, id); err != nil {
					t.Fatal(err)
				}
				blk := m.block
				blk.Forget() // the calls in flight keep their charges
				ids[id] = fresh(id)
				ids[id].block = blk
				continue
			case k <= 3 && len(open) > 0:
				// Finish an open call: a success is given back, a failure
				// counted; either settles its charge.
				i := rng.IntN(len(open))
				c := open[i]
				open = append(open[:i], open[i+1:]...)
				status := 401
				if rng.IntN(2) == 0 {
					status = 204
					for j, q := range c.models {
						q.Refund(now, c.cost, c.wins[j])
					}
				}
				c.block.Settle(c.handle)
				l.Finish(ctx, &c.d, status)
				finished++
				continue
			case k == 1:
				what, mutate = "Peek", false
				if got, err = l.Peek(ctx, id); err != nil {
					t.Fatal(err)
				}
			default:
				capacity := m.models[0].Capacity()
				for _, q := range m.models[1:] {
					capacity = min(capacity, q.Capacity())
				}
				cost = 1 + rng.Int64N(capacity+1)
				what = fmt.Sprintf("ConsumeN(%d)", cost)
				if got, err = l.ConsumeN(ctx, id, cost); err != nil {
					t.Fatal(err)
				}
			}
			held := mutate && m.block.Left(now) == 0 && m.block.Unsettled(now) > 0
			want, wins := blockWant(t, m.models, m.rates, m.block, now, cost, mutate)
			if held && !want.Allowed && !want.OverCapacity {
				heldOff++
			}
			want.Plan = m.plan
			if counts && mutate && want.Allowed && rng.IntN(8) > 0 { // one in eight never finished
				open = append(open, call{d: got, models: m.models, wins: wins, cost: cost, block: m.block, handle: m.block.Charge(now)})
			} else if counts && mutate && want.Allowed {
				m.block.Charge(now)
			}
			if p.Shadow && !want.Allowed {
				want.Allowed, want.Outcome = true, limit.OutcomeShadowLimited
			}
			g := limit.Decision{Allowed: got.Allowed, Outcome: got.Outcome, Blocked: got.Blocked, Cost: got.Cost, Plan: got.Plan, Limit: got.Limit,
				Remaining: got.Remaining, ResetAfter: got.ResetAfter, RetryAfter: got.RetryAfter, OverCapacity: got.OverCapacity}
			if g != want {
				t.Fatalf("round %d step %d: %s of %s at %d, quotas %v (pro %v), BlockFor %v BlockMax %v Shadow %v:\n got %+v\nwant %+v",
					round, step, what, id, now, def, pro, p.BlockFor, p.BlockMax, p.Shadow, g, want)
			}
		}
	}
	t.Logf("%d denials held off from blocking by unsettled charges, %d calls finished", heldOff, finished)
	if rounds >= 8 && heldOff == 0 {
		t.Errorf("no denial met an unsettled charge in %d rounds: the sequences no longer reach the rule", rounds)
	}
}

// RealTimeFloor returns a BlockRun.Set for a store whose keys expire on
// the real clock: set stores each reading, at least ms and never less than
// the real time elapsed since the first call added to the first reading, so
// that no key dies in the store before the readings say its state is dead.
func RealTimeFloor(set func(ms int64)) func(ms int64) int64 {
	var offset int64
	first := true
	return func(ms int64) int64 {
		real := time.Now().UnixMilli()
		if first {
			offset, first = ms-real, false
		}
		offset = max(offset, ms-real)
		set(real + offset)
		return real + offset
	}
}

// blockWant is what the models say a request of cost at now gets (a Peek:
// mutate false, cost 1, nothing changes), and for an admitted one the
// windows it counted in (refmodel.Quota.Admit's).
func blockWant(t *testing.T, ms []refmodel.Quota, rs []limit.Rate, blk *refmodel.Block, now, cost int64, mutate bool) (limit.Decision, []int64) {
	want := limit.Decision{Cost: cost, Outcome: limit.OutcomeLimited}
	var wins []int64
	if !mutate {
		cl := make([]refmodel.Quota, len(ms))
		for i, m := range ms {
			cl[i] = m.Clone()
		}
		ms = cl
	}
	pick := func(ms []refmodel.Quota) {
		best := -1
		var bestRem, bestReset int64
		for i, m := range ms {
			rem, reset := refmodel.Remaining(m, now), m.ResetAfter(now)
			if best < 0 || rem < bestRem || rem == bestRem && reset > bestReset {
				best, bestRem, bestReset = i, rem, reset
			}
		}
		want.Limit, want.Remaining, want.ResetAfter = rs[best].Limit, bestRem, time.Duration(bestReset)*time.Millisecond
	}
	retry := func() {
		for _, m := range ms {
			if !m.Fits(now, cost) {
				want.RetryAfter = max(want.RetryAfter, time.Duration(refmodel.RetryAfter(t, m, now, cost))*time.Millisecond)
			}
		}
	}
	for i, m := range ms {
		if cost > m.Capacity() {
			want.OverCapacity, want.Limit = true, rs[i].Limit
			return want, nil
		}
	}
	all := true
	for _, m := range ms {
		all = all && m.Fits(now, cost)
	}
	switch left := blk.Left(now); {
	case left > 0:
		want.Blocked = true
		views := make([]refmodel.Quota, len(ms))
		for i, m := range ms {
			views[i] = m.Clone()
			views[i].Normalize(now) // seen, not written
		}
		pick(views)
		retry()
		want.RetryAfter = max(want.RetryAfter, time.Duration(left)*time.Millisecond)
		want.Remaining, want.ResetAfter = 0, max(want.ResetAfter, time.Duration(left)*time.Millisecond)
	case all:
		want.Allowed, want.Outcome = true, limit.OutcomeAllowed
		for _, m := range ms {
			wins = append(wins, m.Admit(now, cost))
		}
		pick(ms)
	case blk.Unsettled(now) > 0:
		// Limited by the quotas, which a charge still unsettled may
		// have spent: no block begins.
		for _, m := range ms {
			m.Normalize(now)
		}
		retry()
		pick(ms)
	default:
		for _, m := range ms {
			m.Normalize(now)
		}
		retry()
		pick(ms)
		d := blk.Next(now)
		if mutate {
			blk.Offend(now)
		}
		want.Blocked = true
		want.RetryAfter = max(want.RetryAfter, time.Duration(d)*time.Millisecond)
		want.Remaining, want.ResetAfter = 0, max(want.ResetAfter, time.Duration(d)*time.Millisecond)
	}
	return want, wins
}

// blockRates returns 1 to MaxQuotas distinct quotas of algorithm alg in
// whole ms, small enough for the brute-force models.
func blockRates(rng *rand.Rand, alg limit.Algorithm, scale int64) []limit.Rate {
	var rs []limit.Rate
	seen := map[time.Duration]bool{} // one window is one record: quotas of a policy differ in Window
	for n := 1 + rng.IntN(limitstore.MaxQuotas); len(rs) < n; {
		r := limit.Rate{Limit: 1 + rng.Int64N(6), Window: time.Duration((1+rng.Int64N(40))*scale) * time.Millisecond}
		if alg == limit.TokenBucket {
			r.Burst = 1 + rng.Int64N(6)
		}
		if !seen[r.Window] {
			seen[r.Window] = true
			rs = append(rs, r)
		}
	}
	return rs
}

func blockModels(alg limit.Algorithm, rs []limit.Rate) []refmodel.Quota {
	ms := make([]refmodel.Quota, len(rs))
	for i, r := range rs {
		w := r.Window.Milliseconds()
		if alg == limit.TokenBucket {
			ms[i] = refmodel.NewBucket(r.Limit, r.Burst, w)
		} else {
			ms[i] = refmodel.NewWindow(alg == limit.SlidingWindow, r.Limit, w, 0)
		}
	}
	return ms
}
