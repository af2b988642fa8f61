package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

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
	if _, err := s.Take(ctxT(t), &warm); err != nil {
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
