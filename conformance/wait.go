package conformance

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// waitPolicy is the targets' policy: a token bucket of 50 per second
// (one slot every 20 ms), burst 1, whose requests wait up to 10 s.
func waitPolicy() limit.Policy {
	return limit.Policy{Name: "shaped", Algorithm: limit.TokenBucket, Limit: 50, Window: time.Second, Burst: 1, MaxWait: 10 * time.Second}
}

// waitInterval is waitPolicy's emission interval.
const waitInterval = 20 * time.Millisecond

// orderSlack is how much earlier one request of a process may arrive than
// another and still be served after it: one emission interval, the
// target. A Limiter serves its waiters in the order of their tickets,
// taken as each enters its store call; arrival is stamped as the Limiter
// calls its store, a few instructions after the ticket (a thread
// descheduled there for longer than the interval would show as an
// inversion the limiter did not make).
const orderSlack = waitInterval

// WaitFleet runs the fleet target of Policy.MaxWait in real time: 3
// Limiters, each on its own store from newStore (3 processes on one shared
// store), with 200 callers each on one identity, calling for 10 s with a
// context that ends then. The count is taken from the instant the store
// has answered every caller's first request (its clock reading for the
// last of them, or its deny cache's, which says the slots up to that
// caller's deadline are taken: from then on 600 callers have asked for 500 slots of MaxWait,
// so no slot before the end can pass unreserved; before it, on a loaded
// machine, the callers are still being scheduled, and a request that has
// reached its Limiter's store call may still be on its way to the store):
// the admissions whose slots begin between that instant and the end are
// within 1 % of that span over the emission interval. It checks too that
// no two reserved slots (the store's: Decision.ResetAt less one interval)
// are closer than the emission interval less the store clock's 1 ms, that
// no request went on before its slot nor was given one after its
// deadline, and that within each process a request that arrived (reached
// its Limiter's store call) more than orderSlack before another, and was
// back from that call before the other's slot began, was served at the
// earlier slot (a request whose store call outlasts the queue ahead of it
// cannot be ordered: the slots before it are gone). On a failure it logs
// the admissions in the order of their slots.
// newStore's stores must read the real clock and share their records.
func WaitFleet(t *testing.T, newStore func(t testing.TB) limitstore.Store, opts ...limit.Option) {
	const (
		procs   = 3
		callers = 200
		run     = 10 * time.Second
	)
	var (
		mu     sync.Mutex
		adms   []fleetAdmission
		stamps []*storeStamps
		wg     sync.WaitGroup
	)
	// The stores first (connections, scripts), on another identity.
	var lims [procs]*limit.Limiter
	var arrivals [procs]*arrivalStore
	for p := range lims {
		arrivals[p] = &arrivalStore{Store: newStore(t)}
		lims[p] = limittest.MustNew(arrivals[p], waitPolicy(), opts...)
		if _, err := lims[p].Consume(context.Background(), "warm-up"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	end := start.Add(run)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	for p, l := range lims {
		for range callers {
			st := &storeStamps{} // stamped by arrivalStore, for each call
			stamps = append(stamps, st)
			wg.Go(func() {
				arrivals[p].stamps.Store(goroutineID(), st)
				for time.Now().Before(end) {
					d, err := l.Consume(ctx, "one")
					arrived := st.at
					if err != nil || d.StoreFailed {
						if errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(end) {
							return // asked as the run ended: a guarded store refuses a call past its deadline
						}
						t.Errorf("store failed: %v", err)
						return
					}
					if !d.Allowed {
						// Its slot would begin after the run: come back
						// when told, or at the end.
						select {
						case <-time.After(max(d.RetryAfter, time.Millisecond)):
						case <-ctx.Done():
						}
						continue
					}
					a := fleetAdmission{proc: p, arrived: arrived, back: st.back, went: time.Now(), slot: d.ResetAt.Add(-waitInterval)}
					mu.Lock()
					adms = append(adms, a)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	slices.SortFunc(adms, func(a, b fleetAdmission) int { return a.slot.Compare(b.slot) })
	defer func() {
		if t.Failed() {
			logAdmissions(t, adms, start)
		}
	}()
	all := start     // the store has seen every caller's first request
	reached := start // every caller has reached its first store call
	for _, st := range stamps {
		if st.seen.IsZero() {
			t.Fatal("a caller never reached its store")
		}
		if st.seen.After(all) {
			all = st.seen
		}
		if st.first.After(reached) {
			reached = st.first
		}
	}
	n, nReached := 0, 0
	for _, a := range adms {
		if !a.slot.Before(end) {
			t.Errorf("given a slot %v after its context's deadline", a.slot.Sub(end))
		}
		if a.went.Before(a.slot.Add(-time.Millisecond)) {
			t.Errorf("went on %v before its slot", a.slot.Sub(a.went))
		}
		if !a.slot.Before(all) {
			n++
		}
		if !a.slot.Before(reached) {
			nReached++
		}
	}
	span := end.Sub(all)
	want := int(span / waitInterval) // 50 per second from then to the end
	t.Logf("%d admitted in the %v after the store had answered every caller (%v after the start; every caller had reached its store call %v after it), %d in all, by %d callers in %d processes (want %d, 1 %%: %d)",
		n, span.Round(time.Millisecond), all.Sub(start).Round(time.Millisecond), reached.Sub(start).Round(time.Millisecond), len(adms), procs*callers, procs, want, want/100)
	t.Logf("from the instant every caller had reached its store call: %d admitted, %d slots", nReached, end.Sub(reached)/waitInterval)
	if d := n - want; d < -want/100 || d > want/100 {
		t.Errorf("%d admitted in %v, want %d within 1 %%", n, span, want)
	}
	closest := time.Hour
	for i := 1; i < len(adms); i++ {
		closest = min(closest, adms[i].slot.Sub(adms[i-1].slot))
	}
	t.Logf("closest reserved slots: %v apart", closest)
	if closest < waitInterval-time.Millisecond {
		t.Errorf("two slots %v apart, want at least %v less the clock's 1 ms", closest, waitInterval)
	}
	var worst time.Duration // the widest arrival gap of two requests served out of order
	slow := 0               // pairs whose earlier request was still in its store call at the later one's slot
	defer func() {
		t.Logf("widest arrival gap of two requests of one process served out of order: %v (%d pairs not compared: the earlier one's store call returned after the later one's slot)", worst, slow)
	}()
	for p := range procs {
		var mine []fleetAdmission
		for _, a := range adms {
			if a.proc == p {
				mine = append(mine, a)
			}
		}
		slices.SortFunc(mine, func(a, b fleetAdmission) int { return a.arrived.Compare(b.arrived) })
	pairs:
		for i := range mine {
			for j := i + 1; j < len(mine) && j < i+50; j++ {
				gap := mine[j].arrived.Sub(mine[i].arrived)
				if !mine[i].back.Before(mine[j].slot) {
					// The earlier one's store call returned after the
					// later one's slot began: nothing to order then.
					slow++
					continue
				}
				if end.Sub(mine[i].slot) < waitInterval {
					// The last slot before the deadline: within the
					// store clock's 1 ms of every other waiter's bound,
					// so only its own reserver may take it.
					continue
				}
				if mine[i].slot.After(mine[j].slot) {
					worst = max(worst, gap)
				}
				if gap > orderSlack && !mine[i].slot.Before(mine[j].slot) {
					t.Errorf("process %d: a request that arrived %v before another was served at a later slot (%v after it); arrivals at %v and %v, slots at %v and %v (from the start)", p, gap, mine[i].slot.Sub(mine[j].slot),
						mine[i].arrived.Sub(start), mine[j].arrived.Sub(start), mine[i].slot.Sub(start), mine[j].slot.Sub(start))
					break pairs
				}
			}
		}
	}
}

// fleetAdmission is one admission of WaitFleet: its process, when its
// store call arrived and returned, when it went on, and its slot (the
// store's clock).
type fleetAdmission struct {
	proc                      int
	arrived, back, went, slot time.Time
}

// logAdmissions logs adms, in the order of their slots, as offsets from
// start, with the gap from the slot before.
func logAdmissions(t *testing.T, adms []fleetAdmission, start time.Time) {
	t.Helper()
	var b strings.Builder
	b.WriteString("admissions by slot (ms from the start): slot, gap, process, arrived, back, went\n")
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
	}
	for i, a := range adms {
		gap := time.Duration(0)
		if i > 0 {
			gap = a.slot.Sub(adms[i-1].slot)
		}
		b.WriteString(ms(a.slot.Sub(start)) + " +" + ms(gap) + " p" + strconv.Itoa(a.proc) + " " +
			ms(a.arrived.Sub(start)) + " " + ms(a.back.Sub(start)) + " " + ms(a.went.Sub(start)) + "\n")
	}
	t.Log(b.String())
}

// WaitCancel runs the cancellation target of Policy.MaxWait through a
// Limiter: one request is admitted and 200 reserve the slots of the next
// 4 s at one instant of the store's clock (from newStore, on a fake clock)
// and wait; about 1 s in, 100 of those still waiting, chosen at random, end
// their contexts. It checks that the cancelled requests are limited, that every
// other one is served, and that the store's state then equals what the
// remaining reservations account for: a model that saw only them answers
// the next request exactly as the store does.
func WaitCancel(t *testing.T, newStore NewStoreFunc, opts ...limit.Option) {
	clock := limittest.NewClock(epoch)
	store := &signalStore{Store: newStore(t, clock.Now), took: make(chan struct{}, 1)}
	l := limittest.MustNew(store, waitPolicy(), append([]limit.Option{limit.WithKeyPrefix("conformance")}, opts...)...)
	const n = 201
	type waiter struct {
		cancel context.CancelFunc
		done   chan limit.Decision
	}
	ws := make([]waiter, n)
	start := time.Now()
	for i := range ws {
		ctx, cancel := context.WithCancel(context.Background())
		ws[i] = waiter{cancel, make(chan limit.Decision, 1)}
		go func() {
			d, _ := l.Consume(ctx, "one")
			ws[i].done <- d
		}()
		<-store.took // one at a time into the store: request i gets slot i
	}
	time.Sleep(time.Until(start.Add(time.Second)))
	el := time.Since(start).Truncate(time.Millisecond)
	clock.Advance(el) // the store's clock keeps up
	// 100 of the requests whose slots begin 300 ms or more from now (a
	// waiter's timer started after its reservation, so later still):
	// still waiting, with a margin for a loaded machine.
	first := int((el+300*time.Millisecond)/waitInterval) + 1
	if n-first < 100 {
		t.Fatalf("%v went by before the cancellations: too few waiters left", el)
	}
	cancelled := map[int]bool{}
	for _, i := range rand.New(rand.NewPCG(7, 9)).Perm(n - first)[:100] {
		cancelled[first+i] = true
		ws[first+i].cancel()
	}
	for i, w := range ws {
		d := <-w.done
		switch {
		case cancelled[i] && (d.Allowed || d.Waited == 0):
			t.Fatalf("request %d: cancelled while waiting, got %+v", i, d)
		case !cancelled[i] && !d.Allowed:
			t.Fatalf("request %d: not cancelled, limited: %+v", i, d)
		}
		if i == 100 {
			// The remaining waiters are still waiting; the state is
			// final (every cancellation has given its slot back).
			checkRemaining(t, l, clock, n-len(cancelled))
		}
	}
}

// checkRemaining compares the store's answer to a request that may not
// wait for the slot it would get with that of a model that only saw
// reserved reservations, all at the first instant.
func checkRemaining(t *testing.T, l *limit.Limiter, clock *limittest.Clock, reserved int) {
	t.Helper()
	q := limitstore.Quota{Algorithm: limit.TokenBucket, Limit: 50, WindowMS: 1000, Burst: 1, MaxWaitMS: 10_000}
	ref := &model{m: map[string]modelEntry{}}
	op := oneQuota("k", q)
	op.WaitMS = q.MaxWaitMS
	for range reserved {
		ref.take(&op, epoch.UnixMilli())
	}
	probe := oneQuota("k", q)
	probe.WaitMS = 49
	want := ref.take(&probe, clock.Now().UnixMilli())
	// A deadline 50 ms away: the request may wait 49 ms, too short for
	// the slot, so it is limited and reserves nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, err := l.Consume(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	w := want.Quotas[0]
	if d.Allowed || want.Allowed || d.RetryAfter.Milliseconds() != w.RetryAfterMS || d.ResetAfter.Milliseconds() != w.ResetAfterMS || d.Remaining != w.Remaining {
		t.Fatalf("after 100 cancellations the store answers %+v; the %d remaining reservations alone give %+v", d, reserved, w)
	}
	t.Logf("after 100 cancellations: next slot in %v, as the %d remaining reservations alone give", d.RetryAfter, reserved)
}

// signalStore is a Store that signals after each Take (took, dropped when
// full).
type signalStore struct {
	limitstore.Store
	took chan struct{}
}

func (s *signalStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *signalStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	res, err := limittest.Take(ctx, s.Store, op)
	select {
	case s.took <- struct{}{}:
	default:
	}
	return res, err
}

// arrivalStore is a Store that stamps the instants a Take of a caller's
// goroutine arrives and returns (the last Take of a request: its
// reservation), into the storeStamps registered for that goroutine. The
// stores call Take on the caller's goroutine; the calls keep the run's
// one context, as a service's requests would.
type arrivalStore struct {
	limitstore.Store
	stamps sync.Map // goroutine ID -> *storeStamps
}

func (s *arrivalStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *arrivalStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	at := time.Now()
	var st *storeStamps
	if !op.Refund {
		if v, ok := s.stamps.Load(goroutineID()); ok {
			st = v.(*storeStamps)
			st.at = at
			if st.first.IsZero() {
				st.first = at
			}
		}
	}
	res, err := limittest.Take(ctx, s.Store, op)
	if st != nil {
		st.back = time.Now()
		if st.seen.IsZero() && err == nil {
			// The store's clock in whole ms, truncated: it decided
			// before the next ms.
			st.seen = time.UnixMilli(res.NowMS + 1)
		}
	}
	return res, err
}

// storeStamps are the instants a request's Take arrived and returned, the
// instant its caller's first Take arrived and, on the store's clock, the
// instant by which the store had decided it.
type storeStamps struct{ at, back, first, seen time.Time }

// goroutineID is the number runtime.Stack prints for the calling goroutine.
func goroutineID() uint64 {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)])) // "goroutine 123 [running]:"
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}
