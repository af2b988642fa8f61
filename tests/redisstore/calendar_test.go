package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	. "github.com/quotagate/quotagate/stores/redis"
)

// calPeriods is a calendar as the store sees one: periods of uneven
// lengths (a day of 23, 24 or 25 hours, a month of 28 to 31 days, scaled
// down), each named by its start. The stores know no zone; the engine
// names the period, and this stands in for it.
type calPeriods struct {
	base    int64
	lengths []int64
}

// at returns the period containing t: its start and length.
func (c *calPeriods) at(t int64) (start, length int64) {
	total := int64(0)
	for _, l := range c.lengths {
		total += l
	}
	cycle := floorDivTest(t-c.base, total)
	s := c.base + cycle*total
	for _, l := range c.lengths {
		if t < s+l {
			return s, l
		}
		s += l
	}
	panic("unreachable")
}

// TestDifferentialCalendar: Ops with a calendar quota (Quota.Calendar,
// alone or with rolling quotas, all or nothing) give identical Results,
// field by field, on the memory store and on Redis (miniredis with a fake
// clock that also steps back; a real standalone server and Cluster with
// an injected clock and with server TIME), with refunds, costs and
// period boundaries; the period is named from a clock that runs up to
// 1.5 s apart from the store's, as another process's would. Every key
// written lives at most its period plus the grace (and the skew).
func TestDifferentialCalendar(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		modes := []clockMode{fakeClock}
		if be.real {
			modes = []clockMode{offsetClock, serverClock}
		}
		for _, mode := range modes {
			t.Run(mode.String(), func(t *testing.T) { runCalendarDifferential(t, be, mode) })
		}
	})
}

func runCalendarDifferential(t *testing.T, be *backend, mode clockMode) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	prefix := testPrefix(t)
	var cur int64
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
	base := time.Now().UnixMilli()
	scale := int64(1)
	if mode == offsetClock {
		scale = 100 // periods of seconds: keys outlive the real time between steps
	}
	cals := []*calPeriods{
		{base, []int64{23 * scale, 24 * scale, 25 * scale}},
		{base + 7, []int64{28 * scale, 31 * scale, 30 * scale, 31 * scale, 29 * scale}},
		{base - 3, []int64{2000 * scale, 1500 * scale}},
	}
	type calKey struct {
		op  limitstore.Op
		cal [limitstore.MaxQuotas]*calPeriods
	}
	var keys []calKey
	for i := range 12 {
		name := fmt.Sprintf("id%d", i)
		tag := hashTag(name)
		k := calKey{op: limitstore.Op{N: 1 + i%3}}
		for j := range k.op.N {
			q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: []int64{3, 10, 1, 50}[(i+j)%4]}
			if j == 0 || rng.IntN(2) == 0 {
				k.cal[j] = cals[(i+j)%len(cals)]
			} else {
				q.WindowMS, q.PhaseMS = 40*scale, rng.Int64N(40*scale)
			}
			q.Key = []byte(taggedKey(prefix, tag, fmt.Sprintf("cal%d", j), limit.FixedWindow, name))
			k.op.Quotas[j] = q
		}
		keys = append(keys, k)
	}
	// name sets the calendar quotas of op to the periods containing at.
	name := func(k *calKey, op *limitstore.Op, at int64) {
		for j := range op.N {
			if c := k.cal[j]; c != nil {
				op.Quotas[j].Calendar = true
				op.Quotas[j].PhaseMS, op.Quotas[j].WindowMS = c.at(at)
			}
		}
	}
	cur = base
	start := time.Now()
	var offset int64
	bounds := map[string]int64{}
	type charge struct {
		k  *calKey
		op limitstore.Op
	}
	var charges []charge
	var allowed, denied, refunds, skewed int
	const steps = 4000
	for i := range steps {
		k := &keys[rng.IntN(len(keys))]
		var d int64
		switch r := rng.IntN(100); {
		case r < 35:
		case r < 80:
			d = rng.Int64N(10 * scale)
		case r < 95:
			d = rng.Int64N(60 * scale)
		default:
			d = -rng.Int64N(5 * scale)
		}
		switch mode {
		case fakeClock:
			cur += d
		case offsetClock:
			offset += max(d, 0)
			cur = base + time.Since(start).Milliseconds() + offset
		case serverClock:
			cur = time.Now().UnixMilli()
		}
		engineNow := cur
		if rng.IntN(4) == 0 { // another process's clock
			engineNow += rng.Int64N(3001) - 1500
			skewed++
		}
		op := k.op
		op.Cost = diffCost(rng, &op, mode == fakeClock)
		if len(charges) > 0 && rng.IntN(8) == 0 {
			c := charges[rng.IntN(len(charges))]
			k, op = c.k, c.op
			op.Refund = true
		}
		name(k, &op, engineNow)
		got, err := takeOne(rs, &op)
		if err != nil {
			t.Fatalf("step %d: redis Take: %v", i, err)
		}
		if mode == serverClock {
			cur = got.NowMS
		}
		want, _ := takeOne(ms, &op)
		if got != want {
			t.Fatalf("%v step %d (now %d, engine %d, op %+v):\n redis  %+v\n memory %+v", mode, i, cur, engineNow, op, got, want)
		}
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
			charges = append(charges[:min(len(charges), 64)], charge{k, c})
		default:
			denied++
		}
		for j := range op.N {
			q := &op.Quotas[j]
			if r := got.Quotas[j]; !op.Refund && r.TTLMS > 0 {
				if q.Calendar && r.TTLMS > q.WindowMS+2000 {
					t.Fatalf("step %d: a calendar window of %d ms written with TTL %d ms, over the window plus the skew and the grace", i, q.WindowMS, r.TTLMS)
				}
				b := max(bounds[string(q.Key)], q.WindowMS+2000, r.TTLMS)
				if !q.Calendar {
					b = max(bounds[string(q.Key)], keyBound(q, r.TTLMS))
				}
				if mode == fakeClock {
					b += 5 * scale // the backward steps
				}
				bounds[string(q.Key)] = b
			}
		}
	}
	t.Logf("%v: %d steps identical (%d allowed, %d denied, %d refunds, %d named by a skewed clock)", mode, steps, allowed, denied, refunds, skewed)
	if allowed < steps/20 || denied < steps/20 || refunds < steps/40 {
		t.Errorf("sequence too one-sided to prove anything: %d allowed, %d denied, %d refunds", allowed, denied, refunds)
	}
	n := checkTTLs(t, client, prefix, bounds, mode == serverClock)
	t.Logf("TTL invariant held on %d keys", n)
}

// TestCalendarExactAcrossGoroutines: 50 per calendar day in New York, 8
// goroutines on one Redis with its own clock (group commit: flights of
// several decisions in one script call): exactly 50 admitted, each 429
// limited until the next New York midnight.
func TestCalendarExactAcrossGoroutines(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, be *backend) {
		if !be.real {
			t.Skip("server time: a real Redis")
		}
		prefix := testPrefix(t)
		c := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, c, prefix) })
		s := newStore(t, be)
		l := limittest.MustNew(s, limit.Policy{Name: "daily", Algorithm: limit.FixedWindow, Limit: 50, Per: limit.Day, Location: ny},
			limit.WithKeyPrefix(prefix))
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					d, err := l.Consume(context.Background(), "k")
					if err != nil {
						t.Error(err)
						return
					}
					local := time.Now().In(ny)
					y, m, day := local.Date()
					midnight := time.Date(y, m, day+1, 0, 0, 0, 0, ny)
					if !d.Allowed && (d.ResetAt.Before(midnight.Add(-time.Second)) || d.ResetAt.After(midnight.Add(time.Second))) {
						t.Errorf("limited until %v, want the New York midnight %v", d.ResetAt, midnight)
					}
					mu.Lock()
					if d.Allowed {
						admitted++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if admitted != 50 {
			t.Fatalf("%d admitted of 160, want exactly 50", admitted)
		}
	})
}
