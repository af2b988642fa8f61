package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
)

// TestRegressionWithClockBeyondExactTimes: a caller's clock (WithClock)
// whose reading the script's doubles cannot hold exactly. Since the batch
// reply carries no clock per Op (the Go side takes the reading each Op
// sent), an Op of a flight was decided by the engine at the exact reading
// and by the script at the reading rounded to a double: at 2^53 + 3 ms the
// same Ops got other Results in a flight than one by one (NowMS 2^53 + 3
// against 2^53 + 4, other windows) and some failed ErrBadReply ("the
// script decided true, the engine false") where one by one admitted them.
// Such a reading now fails the Take with an error naming the clock, before
// anything is sent, in a flight and alone alike; the largest reading
// allowed, 2^52 ms, decides exactly and the same in both.
func TestRegressionWithClockBeyondExactTimes(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		for _, at := range []int64{1 << 52, 1<<52 + 1, 1<<53 + 3, math.MaxInt64 / 2} {
			t.Run(fmt.Sprint(at), func(t *testing.T) { testClockBeyondExactTimes(t, be, at) })
		}
	})
}

func testClockBeyondExactTimes(t *testing.T, be *backend, at int64) {
	prefix := testPrefix(t)
	client := be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli()) // the fillers' and the warm-up's
	opt := WithClock(func() time.Time { return time.UnixMilli(clock.Load()) })
	g := newGated(client)
	batched, err := New(g, opt, WithoutGuard())
	if err != nil {
		t.Fatal(err)
	}
	alone, err := New(client, opt, WithoutGuard())
	if err != nil {
		t.Fatal(err)
	}
	warm := oneQuota(prefix+":{warm}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	if _, err := alone.Take(ctxT(t), &warm); err != nil {
		t.Fatal(err)
	}
	// Two Ops per algorithm on one key of limit 1 (the second denied), on
	// windows of 4 ms: a reading rounded to a double lands in another one.
	pa, pb := prefix+":a", prefix+":b"
	ops := func(p string) []limitstore.Op {
		var out []limitstore.Op
		for _, alg := range algorithms {
			q := limitstore.Quota{Algorithm: alg, Limit: 1, WindowMS: 4}
			if alg == limit.TokenBucket {
				q.Burst = 1
			}
			op := oneQuota(fmt.Sprintf("%s:{k}:%v", p, alg), q, 1)
			out = append(out, op, op)
		}
		return out
	}
	opsA, opsB := ops(pa), ops(pb)

	r := startGated(t, batched, g, prefix+":fill")
	clock.Store(at)
	chs := make([]chan outcome, len(opsA))
	for i := range opsA {
		chs[i] = r.startOrFail(&opsA[i])
	}
	r.releaseAll()
	beyond := at > 1<<52
	for i := range opsA {
		a := r.wait(chs[i])
		res, err := alone.Take(ctxT(t), &opsB[i])
		if beyond {
			for _, e := range []error{a.err, err} {
				if e == nil || !strings.Contains(e.Error(), "WithClock's clock read") {
					t.Errorf("Op %d at %d ms: batched %+v, %v; one by one %+v, %v; want both failing on the clock", i, at, a.res, a.err, res, err)
					break
				}
			}
			continue
		}
		if a.err != nil || err != nil || !reflect.DeepEqual(a.res, res) || res.NowMS != at {
			t.Errorf("Op %d at %d ms: batched %+v, %v\none by one %+v, %v; want the same Result at %d", i, at, a.res, a.err, res, err, at)
		}
	}
	if keys := append(scanKeys(t, client, pa), scanKeys(t, client, pb)...); beyond && len(keys) != 0 {
		t.Errorf("at %d ms: keys %q written", at, keys)
	}
}

// startOrFail is start for a Take that may fail before it is queued (it
// then returns at once, never asking its context).
func (r *gatedRun) startOrFail(op *limitstore.Op) chan outcome {
	r.t.Helper()
	wc := newWatchCtx(context.Background())
	ch, done := make(chan outcome, 1), make(chan struct{})
	go func() {
		res, err := r.s.Take(wc, op)
		ch <- outcome{res, err}
		close(done)
	}()
	select {
	case <-r.g.arrived:
		r.t.Fatal("a Take reached Redis while the calls were held; want it queued")
	case <-wc.asked:
	case <-done:
	case <-time.After(10 * time.Second):
		r.t.Fatal("a Take neither failed nor queued within 10 s")
	}
	return ch
}
