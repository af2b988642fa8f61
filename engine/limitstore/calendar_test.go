package limitstore

import (
	"math/rand/v2"
	"testing"

	"github.com/quotagate/quotagate/engine/internal/refmodel"
)

// testPeriods stands in for a calendar: periods of uneven lengths, each
// named by its start (what the engine finds in a time zone).
func testPeriods(lengths []int64, t int64) (start, length int64) {
	total := int64(0)
	for _, l := range lengths {
		total += l
	}
	s := floorDiv(t, total) * total
	for _, l := range lengths {
		if t < s+l {
			return s, l
		}
		s += l
	}
	panic("unreachable")
}

// TestApplyCalendarAgainstReferenceModel drives random sequences of Ops
// with calendar quotas (alone, several, and with rolling windows), costs
// 0..capacity+1, refunds, peeks, clock steps both ways and a period named
// from a clock up to 1.5 s off the store's, through Op.Apply and the
// models, comparing every field of every Result, which states are
// written and each time to live.
func TestApplyCalendarAgainstReferenceModel(t *testing.T) {
	const steps = 40_000
	rng := rand.New(rand.NewPCG(30, 42))
	lengths := [][]int64{{23, 24, 25}, {28, 31, 30, 31, 29}, {2000, 1500}}
	var (
		op      Op
		sts     [MaxQuotas]State
		models  []refmodel.Quota
		cals    [MaxQuotas][]int64
		now     int64
		charges []Op
		counts  [3]int
	)
	reset := func() {
		op = Op{N: 1 + rng.IntN(MaxQuotas)}
		models = models[:0]
		for i := range op.N {
			cals[i] = nil
			if i == 0 || rng.IntN(2) == 0 {
				lim := 1 + rng.Int64N(6)
				op.Quotas[i] = Quota{Algorithm: FixedWindow, Limit: lim, Calendar: true}
				cals[i] = lengths[rng.IntN(len(lengths))]
				models = append(models, refmodel.NewCalendar(lim))
				continue
			}
			q, m := randomQuota(rng, Algorithm(rng.IntN(2)), false)
			op.Quotas[i] = q
			models = append(models, m)
		}
		sts = [MaxQuotas]State{}
		now = 1_000_000 + rng.Int64N(1_000_000)
		charges = charges[:0]
	}
	name := func(o *Op, at int64) {
		for i := range o.N {
			if cals[i] != nil {
				o.Quotas[i].PhaseMS, o.Quotas[i].WindowMS = testPeriods(cals[i], at)
				models[i].(*refmodel.Calendar).Name(o.Quotas[i].PhaseMS, o.Quotas[i].WindowMS)
			}
		}
	}
	reset()
	for i := range steps {
		if i%400 == 0 {
			reset()
		}
		switch r := rng.IntN(100); {
		case r < 30:
		case r < 60:
			now += 1 + rng.Int64N(3)
		case r < 85:
			now += rng.Int64N(60)
		case r < 90:
			now += 1000 + rng.Int64N(3000)
		case r < 96:
			now -= 1 + rng.Int64N(1100)
		default:
			now -= 1000 + rng.Int64N(5000)
		}
		o := op
		capacity := models[0].Capacity()
		for _, m := range models[1:] {
			capacity = min(capacity, m.Capacity())
		}
		o.Cost = rng.Int64N(capacity + 2)
		if len(charges) > 0 && rng.IntN(5) == 0 {
			o = charges[rng.IntN(len(charges))]
			o.Refund = true
		}
		at := now
		if rng.IntN(4) == 0 {
			at += rng.Int64N(3001) - 1500 // the engine's clock off the store's
		}
		name(&o, at)
		if rng.IntN(100) < 8 && !o.Refund {
			o.Peek = true
			views := make([]refmodel.Quota, len(models))
			for j, m := range models {
				views[j] = m.Clone()
			}
			want, _ := refOp(t, views, &o, now)
			before := sts
			if got := o.Apply(&sts, now); got != want || sts != before {
				t.Fatalf("step %d: Peek (%+v, now %d):\n got %+v\nwant %+v", i, o, now, got, want)
			}
			continue
		}
		before := sts
		want, write := refOp(t, models, &o, now)
		got := o.Apply(&sts, now)
		cmp := got
		for j := range cmp.N {
			cmp.Quotas[j].TTLMS = 0
		}
		if cmp != want {
			t.Fatalf("step %d (%+v, now %d, states %+v):\n got %+v\nwant %+v", i, o, now, before, got, want)
		}
		for j := range got.N {
			ttl := got.Quotas[j].TTLMS
			if (ttl > 0) != write[j] {
				t.Fatalf("step %d quota %d: TTLMS %d, model says write=%v", i, j, ttl, write[j])
			}
			if ttl > 0 && !o.Refund && (!models[j].Whole(now+ttl) || ttl > models[j].TTLBound()) {
				t.Fatalf("step %d quota %d: TTL %d: the state still matters then, or over the bound %d", i, j, ttl, models[j].TTLBound())
			}
		}
		switch {
		case o.Refund:
			counts[2]++
		case got.Allowed:
			counts[0]++
			c := o
			for j := range c.N {
				c.Quotas[j].Window = got.Quotas[j].Window
			}
			charges = append(charges, c)
		default:
			counts[1]++
		}
	}
	t.Logf("%d allowed, %d denied, %d refunds", counts[0], counts[1], counts[2])
	if counts[0] < steps/10 || counts[1] < steps/10 || counts[2] < steps/20 {
		t.Errorf("sequence too one-sided: %v", counts)
	}
}
