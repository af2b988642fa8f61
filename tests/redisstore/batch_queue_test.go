package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
)

// TestQueuedCallerGivesUpUncharged: a Take whose context ends while it is
// queued returns the context's error at once and is never sent: its key is
// never charged.
func TestQueuedCallerGivesUpUncharged(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix, client, s, _, r := gatedStore(t, be)
		op := oneQuota(prefix+":{gone}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
		ctx, cancel := context.WithCancel(context.Background())
		ch, queued := r.start(ctx, &op)
		if !queued {
			t.Fatal("the Take reached Redis while the calls were held; want it queued")
		}
		cancel()
		if o := r.wait(ch); !errors.Is(o.err, context.Canceled) {
			t.Fatalf("queued Take after cancel: %+v, want context.Canceled", o)
		}
		r.releaseAll()
		neverSent(t, client, &op)
		res, err := limittest.Take(ctxT(t), s, &op)
		if err != nil || res.Quotas[0].Remaining != 9 {
			t.Fatalf("next Take: %+v, %v; want Remaining 9 (the one that gave up charged nothing)", res, err)
		}
	})
}

// lateCtx is a context whose caller is slow to notice it is done: the
// first Done call reports itself on asked and then waits for hold before
// answering, as a Take's goroutine descheduled between queueing and its
// select would.
type lateCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
	hold  chan struct{}
}

func (c *lateCtx) Done() <-chan struct{} {
	first := false
	c.once.Do(func() { first = true; close(c.asked) })
	if first {
		<-c.hold
	}
	return c.Context.Done()
}

// TestRegressionGaveUpWhileQueuedNeverCharged (found by trying to break
// group commit): a Take whose context ends while it is queued, but whose
// goroutine has not yet noticed when a flight takes the queue, must not be
// sent: Store.Take promises that a Take that gave up while waiting for a
// call to share is never counted. Before the fix the flight (here the flush
// timer's, the Take having a deadline) sent its Op and Redis charged it
// after its caller had returned the context's error. Both cases: a context
// cancelled while its Take is queued, and one whose deadline had passed
// before Take was called (now refused before queueing).
func TestRegressionGaveUpWhileQueuedNeverCharged(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		for _, how := range []string{"cancelled", "expired"} {
			t.Run(how, func(t *testing.T) {
				prefix, client, s, g, r := gatedStore(t, be)
				op := oneQuota(prefix+":{late}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
				// A deadline, so that the flush timer sends the queue 1 ms
				// after the Take queued; "expired": passed before Take.
				dl := time.Now().Add(time.Minute)
				if how == "expired" {
					dl = time.Now().Add(-time.Millisecond)
				}
				parent, cancel := context.WithDeadline(context.Background(), dl)
				defer cancel()
				ctx := &lateCtx{Context: parent, asked: make(chan struct{}), hold: make(chan struct{})}
				ch := make(chan outcome, 1)
				go func() {
					res, err := limittest.Take(ctx, s, &op)
					ch <- outcome{res, err}
				}()
				var o outcome
				select {
				case o = <-ch: // returned without waiting: never queued
				case <-ctx.asked: // queued, its goroutine now slow to notice
					cancel()
					// The flush timer sends the queue: the filler queued
					// before, and the Take only if it is (wrongly) still
					// queued.
					select {
					case n := <-g.arrived:
						if n != 1 { // takeScript: the filler alone
							t.Errorf("the flush sent a call of %d Ops; want the filler's plain call (1): the Take that gave up was sent", n)
						}
						g.permits <- struct{}{}
					case <-time.After(10 * time.Second):
						t.Fatal("no flight within 10 s")
					}
					close(ctx.hold)
					o = r.wait(ch)
				case <-time.After(10 * time.Second):
					t.Fatal("the Take neither returned nor queued within 10 s")
				}
				if o.err == nil || !errors.Is(o.err, parent.Err()) {
					t.Fatalf("the Take that gave up: %+v; want %v", o, parent.Err())
				}
				r.releaseAll()
				neverSent(t, client, &op)
			})
		}
	})
}

// TestCancelledMemberDoesNotFailItsFlight: three Takes in one flight; the
// second's context is cancelled while the flight is out. It returns at
// once with context.Canceled; the other two get their decisions; the
// flight reached Redis, so the second was charged too (as a timed-out call
// may be).
func TestCancelledMemberDoesNotFailItsFlight(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix, _, s, g, r := gatedStore(t, be)
		ops := make([]limitstore.Op, 3)
		chs := make([]chan outcome, 3)
		ctx, cancel := context.WithCancel(context.Background())
		for i := range ops {
			ops[i] = oneQuota(fmt.Sprintf("%s:{m%d}:f", prefix, i), limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
			c := context.Background()
			if i == 1 {
				c = ctx
			}
			if chs[i], _ = r.start(c, &ops[i]); chs[i] == nil {
				t.Fatal("no Take")
			}
		}
		// Let the held plain calls go, but hold the flight.
		for range r.held {
			g.permits <- struct{}{}
		}
		r.held = 0
		select {
		case n := <-g.arrived:
			if n != 4 { // the queued filler and the three Ops
				t.Fatalf("a call of %d Ops arrived; want the flight of 4 Ops", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no flight within 10 s")
		}
		cancel()
		if o := r.wait(chs[1]); !errors.Is(o.err, context.Canceled) {
			t.Fatalf("cancelled member: %+v, want context.Canceled", o)
		}
		r.release()
		g.permits <- struct{}{} // the held flight
		for _, i := range []int{0, 2} {
			if o := r.wait(chs[i]); o.err != nil || !o.res.Allowed || o.res.Quotas[0].Remaining != 9 {
				t.Fatalf("member %d: %+v, %v; want admitted, Remaining 9", i, o.res, o.err)
			}
		}
		for _, ch := range r.fillers {
			if o := r.wait(ch); o.err != nil {
				t.Fatalf("filler: %v", o.err)
			}
		}
		res, err := limittest.Take(ctxT(t), s, &ops[1])
		if err != nil || res.Quotas[0].Remaining != 8 {
			t.Fatalf("the cancelled member's key: %+v, %v; want Remaining 8 (its flight reached Redis)", res, err)
		}
	})
}

// TestClosedStoreFailsQueuedTakes: Takes queued when the Store is closed
// return ErrClosed at once, and are never sent.
func TestClosedStoreFailsQueuedTakes(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix, client, s, _, r := gatedStore(t, be)
		op := oneQuota(prefix+":{closed}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
		ch, queued := r.start(context.Background(), &op)
		if !queued {
			t.Fatal("the Take reached Redis while the calls were held; want it queued")
		}
		s.Close()
		if o := r.wait(ch); !errors.Is(o.err, ErrClosed) {
			t.Fatalf("queued Take after Close: %+v, want ErrClosed", o)
		}
		r.release()
		for _, ch := range r.fillers {
			r.wait(ch) // the held calls end either way; the queued filler got ErrClosed
		}
		if n, err := client.Do(context.Background(), client.B().Exists().Key(string(op.Quotas[0].Key)).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("EXISTS of the closed Store's queued key: %d, %v; want 0 (never sent)", n, err)
		}
	})
}

// TestRegressionFlushNotDeferredBySlotsGivenBack: the flush timer defers
// its extra call while calls out "are answering", on the promise that "the
// next to return takes the queue" (flush, DESIGN.md "Flush timer"). A call
// that returns while more than maxFlights calls are out gives its slot
// back instead (keepSlot) and takes nothing from the queue, yet it counted
// as an answer: on a slow link with extra calls out (each started by the
// timer), their returns, less than 1 ms apart, kept deferring the flush,
// and a queued Take with a deadline waited until the calls out had drained
// back to maxFlights, although no call that could take it returned.
//
// Here: the two plain calls held at Redis's door, 100 extra calls held too
// (one flushed per queued Take), then a Take B queued with a deadline and
// the extra calls' Takes give up one every 150 µs. Each returns above maxFlights:
// none takes B. B's flight must reach Redis within a few ms (the timer's 1
// ms and scheduling), not after the 15 ms the returns last.
func TestRegressionFlushNotDeferredBySlotsGivenBack(t *testing.T) {
	be := standaloneBackend(t)
	prefix, _, s, g := countingStore(t, be)
	q := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}
	warm := oneQuota(prefix+":{warm}:f", q, 1)
	if _, err := limittest.Take(ctxT(t), s, &warm); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the warm call's return is long past
	r := startGated(t, s, g, prefix+":fill")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const extra = 100
	var chs []chan outcome
	var cancels []context.CancelFunc
	for i := range extra {
		op := oneQuota(fmt.Sprintf("%s:{x%d}:f", prefix, i), q, 1)
		ctxI, cancelI := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelI()
		ch, queued := r.start(ctxI, &op)
		if i > 0 { // the first extra call carries the filler too: held till the end
			cancels = append(cancels, cancelI)
		}
		chs = append(chs, ch)
		if queued {
			select {
			case <-g.arrived: // the flush timer's extra call
				r.held++
			case <-time.After(10 * time.Second):
				t.Fatal("a queued Take with a deadline was not flushed within 10 s")
			}
		} else {
			r.held++
		}
	}
	opB := oneQuota(prefix+":{b}:f", q, 1)
	tB := time.Now()
	chB, queued := r.start(ctx, &opB)
	if !queued {
		t.Fatal("B reached Redis at once; want it queued")
	}
	chs = append(chs, chB)
	// The returns, one every 150 µs (a busy wait: a ticker's ticks
	// coalesce under load), from a goroutine of their own: each extra
	// call's only member gives up, so the gated call returns at once, with
	// no round trip to Redis.
	var released atomic.Int32
	stop := make(chan struct{})
	go func() {
		for _, c := range cancels {
			select {
			case <-stop:
				return
			default:
			}
			c()
			released.Add(1)
			for t0 := time.Now(); time.Since(t0) < 150*time.Microsecond; {
			}
		}
	}()
	var waited time.Duration
	select {
	case <-g.arrived:
		waited = time.Since(tB)
		r.held++ // B's flight waits for its permit too
	case <-time.After(10 * time.Second):
		t.Fatal("B's flight did not reach Redis within 10 s")
	}
	close(stop)
	r.releaseAll()
	for _, ch := range chs {
		if o := r.wait(ch); o.err != nil && !errors.Is(o.err, context.Canceled) {
			t.Fatalf("Take: %v", o.err)
		}
	}
	n := released.Load()
	t.Logf("B's flight reached Redis %v after B queued; %d of %d calls returned meanwhile (each gave its slot back)", waited, n, len(cancels))
	// An order, not a time bound: B's flight must leave while the extra
	// calls are still returning (the flush timer, about 1 ms after B
	// queued, while the returns last about 15 ms), not once they are done.
	if n >= int32(len(cancels)) {
		t.Errorf("B's flight left only after all %d returns (%v after B queued): returns that gave their slot back deferred the flush", n, waited)
	}
}
