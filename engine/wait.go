package limit

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// This file is Policy.MaxWait's waiting: a request the token bucket cannot
// take now may reserve the next slot in the store (limitstore.Op.WaitMS)
// and wait for it here, on its own goroutine, with one timer.

// enterWait counts the request among this Limiter's waiters and sets
// op.WaitMS, the longest it may wait: MaxWait, less what leaves its slot
// beginning before ctx's deadline. It returns the request's place in the
// order of arrival (a ticket, and that longest wait),
// or a zero ticket, with op.WaitMS 0 and nothing counted, when MaxWaiting
// requests wait already (the request is then decided as without MaxWait)
// or when the deadline leaves no time.
func (l *Limiter) enterWait(ctx context.Context, op *limitstore.Op) arrival {
	wait := l.maxWaitMS
	if dl, ok := ctx.Deadline(); ok {
		// The slot must begin before the deadline: whole ms, rounded
		// down, less one for the store's truncated clock.
		wait = min(wait, time.Until(dl).Milliseconds()-1)
	}
	if wait <= 0 {
		return arrival{}
	}
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		return arrival{}
	}
	op.WaitMS = wait
	return arrival{ticket: l.tickets.Add(1), waitMS: wait}
}

// arrival is a waiting request's place in its Limiter's order of arrival:
// its ticket (1, 2, ...; 0: not waiting) and the longest it may wait (its
// MaxWait or deadline: Op.WaitMS).
type arrival struct {
	ticket uint64
	waitMS int64
}

// A line holds the waiters of one Limiter whose reservations are
// interchangeable: the same keys (bucket, identity, plan, quotas) and the
// same cost. The store hands out slots in the order the reservations reach
// it, which is not the order in which the requests arrived (the scheduler,
// the store's lock or connections, batching); the line gives its slots to
// its waiters in the order of their arrival instead, a swap the store
// never sees (every slot stays reserved). A waiter is moved to a later
// slot only when that slot begins no later than its own bound (latestMS,
// on the store's clock, as the store checked its reservation) and, on
// this process's clock, no later than its context's deadline: a
// reservation keeps its promise of MaxWait and the deadline.
// When a waiter's context ends, the waiters after it move one slot earlier
// each and the line's last slot is the one given back: the slots still
// held stay one emission interval apart, with no hole, and the store's
// state after the Refund is what the remaining reservations account for
// (the slots freed reach the store in the order freed, latest first: it
// gives back only its latest reservation).
// Lines are per Limiter (per process): across processes the store's order
// stands. No goroutine or timer is added: each waiter keeps its one timer
// and is told (moved) when its slot changes.
type line struct {
	waiters []*waiter     // in the order they are given slots
	slots   []reservation // by instant; waiters[i] holds slots[i]
	// givingBack is closed once the line's latest give-back (see leave)
	// has been answered; nil: none under way. The store gives a
	// reservation back only while it is the latest (see
	// limitstore.Quota's refund), so the slots freed, latest first, must
	// reach it in that order.
	givingBack chan struct{}
}

// lineKey names a line: the Op's keys and its cost.
type lineKey struct {
	keys string
	cost int64
}

// waiter is one waiting request.
type waiter struct {
	arrival
	latestMS int64         // the latest slot it may be given, on the store's clock (Unix ms)
	deadline time.Time     // its context's deadline; zero: none
	r        reservation   // the slot it holds (guarded by Limiter.linesMu)
	moved    chan struct{} // signalled when r changes
}

// reservation is one slot the store reserved and the Decision's numbers
// that go with it.
type reservation struct {
	slotMS     int64     // the store's instant of the slot, Unix ms: the line's order
	due        time.Time // the slot's instant on this process's clock
	waitMS     int64
	remaining  int64
	resetAfter time.Duration
	resetAt    time.Time
	quota      int
	limit      int64
	windows    [limitstore.MaxQuotas]int64
	epochs     [limitstore.MaxQuotas]int64
}

// reservationOf is d's slot, whose wait began at start.
func reservationOf(d *Decision, start time.Time) reservation {
	return reservation{
		slotMS: d.ResetAt.UnixMilli() - d.ResetAfter.Milliseconds() + d.waitMS, // the store's now + the wait
		due:    start.Add(time.Duration(d.waitMS) * time.Millisecond),
		waitMS: d.waitMS, remaining: d.Remaining, resetAfter: d.ResetAfter, resetAt: d.ResetAt,
		quota: d.quota, limit: d.Limit, windows: d.charge.windows, epochs: d.charge.epochs,
	}
}

// apply gives d the numbers of slot r.
func (r *reservation) apply(d *Decision) {
	d.waitMS, d.Remaining, d.ResetAfter, d.ResetAt = r.waitMS, r.remaining, r.resetAfter, r.resetAt
	d.quota, d.Limit, d.charge.windows, d.charge.epochs = r.quota, r.limit, r.windows, r.epochs
}

// join puts w, holding reservation w.r, in line k: before the first
// waiter that arrived after it, unless a waiter it would move to a later
// slot could not take it (that waiter's bound) or w could not take the
// slot of its place (its own), and hands the slots out again from there.
// It returns the instant of w's slot.
func (l *Limiter) join(k lineKey, w *waiter) time.Time {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	if l.lines == nil {
		l.lines = make(map[lineKey]*line)
	}
	ln := l.lines[k]
	if ln == nil {
		ln = &line{}
		l.lines[k] = ln
	}
	rp := len(ln.slots) // where w's reservation goes, by instant
	for rp > 0 && ln.slots[rp-1].slotMS > w.r.slotMS {
		rp--
	}
	ln.slots = slices.Insert(ln.slots, rp, w.r)
	p := 0 // before the first waiter that arrived after w (the order may have exceptions: bounds)
	for p < len(ln.waiters) && ln.waiters[p].ticket < w.ticket {
		p++
	}
	// Waiters p..rp-1 would each move one slot later: not past their
	// bound. (Waiters rp..p-1, when w's slot is earlier than theirs
	// although it arrived after them, move one slot earlier.)
	for j := rp - 1; j >= p; j-- {
		if !ln.waiters[j].mayTake(&ln.slots[j+1]) {
			p = j + 1
			break
		}
	}
	// Behind them, w takes a later slot than its own: not past its bound.
	for p > rp && !w.mayTake(&ln.slots[p]) {
		p--
	}
	ln.waiters = slices.Insert(ln.waiters, p, w)
	ln.handOut(min(p, rp))
	return w.r.due
}

// mayTake reports whether w may be given slot r: within its bound on the
// store's clock, and beginning, on this process's clock (r.due, never
// early), no later than its deadline.
func (w *waiter) mayTake(r *reservation) bool {
	return r.slotMS <= w.latestMS && (w.deadline.IsZero() || !r.due.After(w.deadline))
}

// handOut gives waiters[from:] the slots of their positions, telling each
// one whose slot changed.
func (ln *line) handOut(from int) {
	for j := from; j < len(ln.waiters); j++ {
		if o := ln.waiters[j]; o.r.slotMS != ln.slots[j].slotMS {
			o.r = ln.slots[j]
			select {
			case o.moved <- struct{}{}:
			default:
			}
		}
	}
}

// slot reports the instant of w's slot, and, when it has begun, takes w
// (and its slot) out of line k.
func (l *Limiter) slot(k lineKey, w *waiter) (due time.Time, begun bool) {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	if time.Now().Before(w.r.due) {
		return w.r.due, false
	}
	ln := l.lines[k]
	i := slices.Index(ln.waiters, w)
	ln.waiters = slices.Delete(ln.waiters, i, i+1)
	ln.slots = slices.Delete(ln.slots, i, i+1)
	l.dropIfEmpty(k, ln)
	return w.r.due, true
}

// leave takes w out of line k, whose waiters after it move one slot
// earlier each, and returns the slot freed: the line's last. The caller
// gives that slot back once after (the give-back of the slot freed
// before it; nil: none) is closed, then calls gaveBack(k, done).
func (l *Limiter) leave(k lineKey, w *waiter) (freed reservation, after <-chan struct{}, done chan struct{}) {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	ln := l.lines[k]
	i := slices.Index(ln.waiters, w)
	ln.waiters = slices.Delete(ln.waiters, i, i+1)
	last := len(ln.slots) - 1
	freed = ln.slots[last]
	ln.slots = ln.slots[:last]
	ln.handOut(i)
	if ln.givingBack != nil {
		after = ln.givingBack
	}
	done = make(chan struct{})
	ln.givingBack = done
	return freed, after, done
}

// gaveBack ends the give-back of line k that closes done.
func (l *Limiter) gaveBack(k lineKey, done chan struct{}) {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	close(done)
	if ln := l.lines[k]; ln != nil && ln.givingBack == done {
		ln.givingBack = nil
		l.dropIfEmpty(k, ln)
	}
}

// dropIfEmpty forgets line k, ln, once it has neither waiters nor a
// give-back under way.
func (l *Limiter) dropIfEmpty(k lineKey, ln *line) {
	if len(ln.waiters) == 0 && ln.givingBack == nil {
		delete(l.lines, k)
	}
}

// await waits for the slot the store reserved for d (d.waitMS from the
// store's decision), or the one its line gives it instead (see line), or
// for ctx's end, whichever comes first. At its slot the request goes on,
// admitted, with the numbers of that slot, its ResetAfter counted down by
// the wait. When ctx ends first, or when the slot it holds begins after
// ctx's deadline (a store call that came back late: the waiter could
// only sleep until its deadline), it gives up: see giveUp. A deadline
// reached once the slot has begun is no end first, whichever the waiter
// hears first: the slot began while ctx was live. Either way
// d.Waited is the time waited and the Observer hears of it.
func (l *Limiter) await(ctx context.Context, d *Decision, a arrival, k lineKey) {
	start := time.Now()
	w := &waiter{arrival: a, r: reservationOf(d, start), moved: make(chan struct{}, 1)}
	w.latestMS = w.r.slotMS - d.waitMS + a.waitMS // the store's now + the longest wait
	w.deadline, _ = ctx.Deadline()
	due := l.join(k, w)
	t := time.NewTimer(time.Until(due))
	defer t.Stop()
waiting:
	for {
		if !w.deadline.IsZero() && due.After(w.deadline) {
			l.giveUp(ctx, d, w, k, start)
			return
		}
		select {
		case <-t.C:
		case <-w.moved:
		case <-ctx.Done():
			// At its deadline the slot it holds has begun (it begins
			// no later: see mayTake), while the context was live: the
			// slot is its own, whether the timer or the context was
			// heard first (a late wake is the scheduler's, and the
			// slot would pass unused). Any other end gives up.
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				if _, begun := l.slot(k, w); begun {
					break waiting
				}
			}
			l.giveUp(ctx, d, w, k, start)
			return
		}
		var begun bool
		if due, begun = l.slot(k, w); begun {
			break waiting
		}
		t.Reset(time.Until(due))
	}
	d.Waited = time.Since(start)
	w.r.apply(d)
	// The numbers as of the slot: the store gave them as of the
	// reservation (ResetAt, an instant, stands).
	d.ResetAfter = max(d.ResetAfter-time.Duration(d.waitMS)*time.Millisecond, 0)
	l.cfg.rep.observer.Wait(d.Bucket, d.Waited, true)
}

// giveUp ends w's wait, begun at start, unserved: w leaves line k, the
// slot freed is given back in one Refund (it is still ahead, so all of its
// cost comes back), after the line's give-backs under way, and d becomes
// limited, with RetryAfter the time w's slot was still away.
func (l *Limiter) giveUp(ctx context.Context, d *Decision, w *waiter, k lineKey, start time.Time) {
	d.Waited = time.Since(start)
	freed, after, done := l.leave(k, w)
	left := time.Until(w.r.due) // out of the line: w.r is its own again
	freed.apply(d)              // the charge given back: the line's last slot
	if after != nil {
		<-after // the later slot freed before this one goes back first
	}
	// The request's context may have ended: the refund has a context of
	// its own (the store's timeout bounds it; package guard).
	l.giveBack(context.WithoutCancel(ctx), &d.charge, d.charge.cost)
	l.gaveBack(k, done)
	d.charge.lim = nil
	d.Allowed, d.Outcome = false, OutcomeLimited
	d.RetryAfter = max(left, time.Millisecond).Truncate(time.Millisecond)
	l.cfg.rep.observer.Wait(d.Bucket, d.Waited, false)
}
