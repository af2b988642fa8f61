package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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
		res, err := s.Take(ctxT(t), &op)
		if err != nil || res.Quotas[0].Remaining != 9 {
			t.Fatalf("next Take: %+v, %v; want Remaining 9 (the one that gave up charged nothing)", res, err)
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
		res, err := s.Take(ctxT(t), &ops[1])
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
