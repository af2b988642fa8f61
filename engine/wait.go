package limit

import (
	"context"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// This file is Policy.MaxWait's waiting: a request the token bucket cannot
// take now may reserve the next slot in the store (limitstore.Op.WaitMS)
// and wait for it here, on its own goroutine, with one timer.

// enterWait counts the request among this Limiter's waiters and sets
// op.WaitMS, the longest it may wait: MaxWait, less what leaves its slot
// beginning before ctx's deadline. It reports false, with op.WaitMS 0 and
// nothing counted, when MaxWaiting requests wait already (the request is
// then decided as without MaxWait) or when the deadline leaves no time.
func (l *Limiter) enterWait(ctx context.Context, op *limitstore.Op) bool {
	wait := l.maxWaitMS
	if dl, ok := ctx.Deadline(); ok {
		// The slot must begin before the deadline: whole ms, rounded
		// down, less one for the store's truncated clock.
		wait = min(wait, time.Until(dl).Milliseconds()-1)
	}
	if wait <= 0 {
		return false
	}
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		return false
	}
	op.WaitMS = wait
	return true
}

// await waits for the slot the store reserved for d (d.waitMS from the
// store's decision) or for ctx's end, whichever comes first. At its slot
// the request goes on, admitted, its ResetAfter counted down by the wait;
// when ctx ends first, the reservation is
// given back in one Refund (its slot is still ahead, so all of its cost
// comes back) and d becomes limited, with RetryAfter the time its slot was
// still away. Either way d.Waited is the time waited and the Observer hears
// of it.
func (l *Limiter) await(ctx context.Context, d *Decision) {
	start := time.Now()
	t := time.NewTimer(time.Duration(d.waitMS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		d.Waited = time.Since(start)
		// The numbers as of the slot: the store gave them as of the
		// reservation (ResetAt, an instant, stands).
		d.ResetAfter = max(d.ResetAfter-time.Duration(d.waitMS)*time.Millisecond, 0)
		l.cfg.rep.observer.Wait(d.Bucket, d.Waited, true)
		return
	case <-ctx.Done():
	}
	d.Waited = time.Since(start)
	left := time.Duration(d.waitMS)*time.Millisecond - d.Waited
	// The request's context has ended: the refund has a context of its
	// own (the store's timeout bounds it; package guard).
	l.giveBack(context.WithoutCancel(ctx), &d.charge)
	d.charge.lim = nil
	d.Allowed, d.Outcome = false, OutcomeLimited
	d.RetryAfter = max(left, time.Millisecond).Truncate(time.Millisecond)
	l.cfg.rep.observer.Wait(d.Bucket, d.Waited, false)
}
