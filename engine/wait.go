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
// interchangeable: the same keys (bucket, identity, plan, quotas), the
// same store and the same cost. The store hands out slots in the order the
// reservations reach it, which is not the order in which the requests
// arrived (the scheduler, the store's lock or connections, batching); the
// line gives its slots to its waiters in the order of their arrival
// instead, a swap the store never sees (every slot stays reserved). A
// waiter is moved to a later slot only when that slot begins no later
// than its own bound (latestMS, on the store's clock, as the store checked
// its reservation) and, on this process's clock, no later than its
// context's deadline: a reservation keeps its promise of MaxWait and the
// deadline.
// The waiters hold the line's earliest slots; the slots after theirs are
// spare: reserved in the store and held by nobody. When a waiter's context
// ends, the waiters after it move one slot earlier each and the last slot
// they held becomes spare. Spare slots go back to the store latest first,
// one Refund at a time (see giveBackSpare); the store gives back only its
// latest reservation (see limitstore.Quota's refund), so a spare that a
// later reservation follows (one of this Limiter still on its way, another
// line's, another process's) stays reserved, and the line keeps it: the
// next waiter to join takes it instead of its own later slot, which then
// is the line's latest, to be given back in turn. A spare whose instant
// has passed is dropped.
// Lines are per Limiter (per process): across processes the store's order
// stands. Each waiter keeps its one timer and is told (moved) when its
// slot changes; the give-backs after a give-up's one run on a goroutine
// of a waiting waiter's (helpGiveBack), which it waits for before it
// returns.
type line struct {
	waiters []*waiter     // in the order they are given slots
	slots   []reservation // by instant; waiters[i] holds slots[i], slots[len(waiters):] are spare
	// giving reports a Refund of a spare under way (the slot is out of
	// slots until answered): one at a time, so that they reach the store
	// latest first.
	giving bool
	rtt    time.Duration // how long the line's last Refund took
	// sweep drops the spares once the last one has passed, armed while
	// the line has spares and no waiters; nil: not armed.
	sweep *time.Timer
	ch    charge // the charge of the line's slots, less each slot's own numbers
}

// lineKey names a line: the Op's keys, its store (FailLocal's local one
// or the shared one) and its cost.
type lineKey struct {
	keys  string
	local bool
	cost  int64
}

// waiter is one waiting request.
type waiter struct {
	arrival
	latestMS int64         // the latest slot it may be given, on the store's clock (Unix ms)
	latest   time.Time     // and on this process's clock: its longest wait from when its wait began
	deadline time.Time     // its context's deadline; zero: none
	r        reservation   // the slot it holds (guarded by Limiter.linesMu)
	moved    chan struct{} // signalled when r changes
	help     chan struct{} // signalled when the line has spares to give back and no Refund under way
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
	refused    bool // spare, and the store gave nothing back for it since the line last gave one back
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

// join puts w, holding reservation w.r charged as c, in line k: before
// the first waiter that arrived after it, unless a waiter it would move to
// a later slot could not take it (that waiter's bound) or w could not take
// the slot of its place (its own), and hands the slots out again from
// there (a spare slot earlier than w's own is taken: w's own becomes
// spare, given back while the line waits: see helpGiveBack). It returns
// the instant of w's slot.
func (l *Limiter) join(k lineKey, w *waiter, c *charge) time.Time {
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
	ln.ch = *c
	ln.dropPassed(time.Now())
	n := len(ln.waiters)
	rp := len(ln.slots) // where w's reservation goes, by instant
	for rp > 0 && ln.slots[rp-1].slotMS > w.r.slotMS {
		rp--
	}
	ln.slots = slices.Insert(ln.slots, rp, w.r)
	p := 0 // before the first waiter that arrived after w (the order may have exceptions: bounds)
	for p < n && ln.waiters[p].ticket < w.ticket {
		p++
	}
	// Waiters p..min(rp, n)-1 would each move one slot later: not past
	// their bound. (Waiters rp..p-1, when w's slot is earlier than theirs
	// although it arrived after them, move one slot earlier.)
	for j := min(rp, n) - 1; j >= p; j-- {
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
	ln.wakeHelper()
	return w.r.due
}

// wakeHelper asks the line's last waiter (the one whose slot is furthest)
// to give its spares back while it waits (see helpGiveBack), when it has
// spares to give and no Refund under way.
func (ln *line) wakeHelper() {
	if n := len(ln.waiters); n > 0 && ln.spareToGive() {
		select {
		case ln.waiters[n-1].help <- struct{}{}:
		default:
		}
	}
}

// mayTake reports whether w may be given slot r: within its bound on the
// store's clock, and beginning, on this process's clock (r.due, never
// early), within its longest wait and no later than its deadline.
func (w *waiter) mayTake(r *reservation) bool {
	return r.slotMS <= w.latestMS && !r.due.After(w.latest) && (w.deadline.IsZero() || !r.due.After(w.deadline))
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

// dropPassed drops the spare slots whose instant is not after now: nobody
// could be served at them any more.
func (ln *line) dropPassed(now time.Time) {
	n := len(ln.waiters)
	kept := slices.DeleteFunc(ln.slots[n:], func(r reservation) bool { return !r.due.After(now) })
	ln.slots = ln.slots[:n+len(kept)]
}

// spareToGive reports whether the line's latest slot is a spare worth a
// Refund (the store has not refused it since the line last gave one back)
// with none under way.
func (ln *line) spareToGive() bool {
	return !ln.giving && len(ln.slots) > len(ln.waiters) && !ln.slots[len(ln.slots)-1].refused
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
	l.settle(k, ln)
	return w.r.due, true
}

// leave takes w out of line k, whose waiters after it move one slot
// earlier each: the last slot they held becomes spare. It reports whether
// spares are to be given back (see giveBackSpare).
func (l *Limiter) leave(k lineKey, w *waiter) (give bool) {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	ln := l.lines[k]
	i := slices.Index(ln.waiters, w)
	ln.waiters = slices.Delete(ln.waiters, i, i+1)
	ln.handOut(i)
	ln.dropPassed(time.Now())
	give = ln.spareToGive()
	l.settle(k, ln)
	return give
}

// takeSpare takes line k's latest slot, a spare, out of the line for a
// Refund, with the charge to give it back with, which settles no one's
// charge (a waiter's charge is its own, whatever slot it held: see
// giveUp); ok false: none to give (see spareToGive). For a waiter w (nil:
// one that gave up) it takes one only while w is in the line and its own
// slot is more than two of the line's Refunds away: the waiter is not to
// be late for it.
func (l *Limiter) takeSpare(k lineKey, w *waiter) (r reservation, c charge, ok bool) {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	ln := l.lines[k]
	if ln == nil {
		return reservation{}, charge{}, false
	}
	if w != nil && (!slices.Contains(ln.waiters, w) || time.Until(w.r.due) <= 2*ln.rtt+time.Millisecond) {
		return reservation{}, charge{}, false
	}
	ln.dropPassed(time.Now())
	if !ln.spareToGive() {
		l.settle(k, ln)
		return reservation{}, charge{}, false
	}
	r = ln.slots[len(ln.slots)-1]
	ln.slots = ln.slots[:len(ln.slots)-1]
	ln.giving = true
	c = ln.ch
	c.windows, c.epochs, c.settled = r.windows, r.epochs, true
	return r, c, true
}

// gaveBack ends the Refund of line k's spare r, which took rtt: kept
// reports that the store gave nothing back (the slot stays reserved: the
// line keeps it, as a spare or for a waiter that joined meanwhile with a
// later slot); otherwise it is gone, and the spares the store refused
// before may be its latest now. It reports whether spares are to be given
// back, and asks the line's last waiter to (see wakeHelper).
func (l *Limiter) gaveBack(k lineKey, r reservation, kept bool, rtt time.Duration) (give bool) {
	l.linesMu.Lock()
	defer l.linesMu.Unlock()
	ln := l.lines[k]
	ln.giving, ln.rtt = false, rtt
	if kept && r.due.After(time.Now()) { // one that has begun meanwhile: nobody could be served at it
		r.refused = true
		i := len(ln.slots)
		for i > 0 && ln.slots[i-1].slotMS > r.slotMS {
			i--
		}
		ln.slots = slices.Insert(ln.slots, i, r)
		ln.handOut(i)
	} else {
		for i := range ln.slots {
			ln.slots[i].refused = false
		}
	}
	ln.dropPassed(time.Now())
	give = ln.spareToGive()
	ln.wakeHelper()
	l.settle(k, ln)
	return give
}

// settle forgets line k, ln, once it has neither waiters, spares nor a
// Refund under way, and arms its sweep while it has spares and no
// waiters (the lock held).
func (l *Limiter) settle(k lineKey, ln *line) {
	if len(ln.waiters) > 0 || ln.giving {
		return
	}
	if len(ln.slots) == 0 {
		if ln.sweep != nil {
			ln.sweep.Stop()
		}
		delete(l.lines, k)
		return
	}
	if ln.sweep == nil {
		ln.sweep = time.AfterFunc(time.Until(ln.slots[len(ln.slots)-1].due), func() {
			l.linesMu.Lock()
			defer l.linesMu.Unlock()
			if l.lines[k] != ln {
				return
			}
			ln.sweep = nil
			ln.dropPassed(time.Now())
			l.settle(k, ln)
		})
	}
}

// giveBackSpare gives line k's latest spare back in one Refund, on the
// calling goroutine, for w (see takeSpare), or for a waiter that gave up
// (w nil), whose own charge own the Refund settles, and reports whether
// it gave one back and whether more are to be given back. ctx is the
// Refund's own, not the request's, which may have ended: the store's
// timeout bounds it (package guard), and a waiter's ends when the waiter
// goes on (see await); a Refund whose context ends first counts as given
// back (see refundSlot). The line's Refunds go one at a time, latest
// first (the store gives back only its latest reservation): a caller that
// gave up while one is under way returns at once, and the spares left
// after one are given back by the line's waiters while they wait
// (helpGiveBack), or taken by the next to join.
func (l *Limiter) giveBackSpare(ctx context.Context, k lineKey, w *waiter, own *charge) (gave, more bool) {
	r, c, ok := l.takeSpare(k, w)
	if !ok {
		return false, false
	}
	if own != nil {
		c.lease, c.settled = own.lease, false
	}
	t0 := time.Now()
	kept := l.refundSlot(ctx, &c)
	return true, l.gaveBack(k, r, kept, time.Since(t0))
}

// helpGiveBack gives line k's spares back for waiter w, one Refund after
// another, while w's slot is far enough away (see takeSpare), and closes
// done.
func (l *Limiter) helpGiveBack(ctx context.Context, k lineKey, w *waiter, done chan struct{}) {
	defer close(done)
	for {
		if _, more := l.giveBackSpare(ctx, k, w, nil); !more {
			return
		}
	}
}

// refundSlot gives back c, a reserved slot, and reports whether the store
// answered that nothing came back: every quota's state unchanged and, for
// a token bucket, its TAT still at or after the slot's end (a later
// reservation holds it). Anything else (an error, a partial refund, an
// answer that says nothing) counts as given back: a slot kept that the
// store freed would be handed out twice; one given up that it kept only
// passes unused.
func (l *Limiter) refundSlot(ctx context.Context, c *charge) (kept bool) {
	var res limitstore.Result
	if c.lim == nil || c.set == nil || c.set.n < 1 || !l.giveBack(ctx, c, c.cost, &res) {
		return false
	}
	for i := range min(c.set.n, limitstore.MaxQuotas) {
		r := &res.Quotas[i]
		if r.TTLMS > 0 || l.policy.Algorithm == TokenBucket && r.Window < c.windows[i] {
			return false
		}
	}
	return true
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
	w := &waiter{arrival: a, r: reservationOf(d, start), moved: make(chan struct{}, 1), help: make(chan struct{}, 1)}
	w.latestMS = w.r.slotMS - d.waitMS + a.waitMS // the store's now + the longest wait
	w.latest = start.Add(time.Duration(a.waitMS) * time.Millisecond)
	w.deadline, _ = ctx.Deadline()
	due := l.join(k, w, &d.charge)
	// helping is closed once w's give-backs for its line (see
	// helpGiveBack) are done; nil: none under way. They stop in time for
	// its slot (see takeSpare); w ends the one under way when it returns
	// (stopHelping: a Refund the store has not answered by then counts as
	// given back), and returns after it.
	var helping chan struct{}
	defer func() {
		if helping != nil {
			<-helping
		}
	}()
	hctx, stopHelping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHelping() // before the wait for helping
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
		case <-w.help:
			if helping != nil {
				select {
				case <-helping:
				default:
					continue // under way: it goes on with the spares
				}
			}
			helping = make(chan struct{})
			go l.helpGiveBack(hctx, k, w, helping)
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

// giveUp ends w's wait, begun at start, unserved: w leaves line k, whose
// last slot held becomes spare and is given back (see giveBackSpare: one
// store call at most here), and d becomes limited, with RetryAfter the
// time w's slot was still away. The Refund settles d's own charge when the
// store keeps it unsettled (see Finish), whichever slot it gives back;
// when no spare is given back here (a Refund of the line's under way, or
// its latest spare one the store kept) one Refund of nothing settles it.
func (l *Limiter) giveUp(ctx context.Context, d *Decision, w *waiter, k lineKey, start time.Time) {
	d.Waited = time.Since(start)
	give := l.leave(k, w)
	left := time.Until(w.r.due) // out of the line: w.r is its own again
	w.r.apply(d)
	gave := false
	if give {
		gave, _ = l.giveBackSpare(context.WithoutCancel(ctx), k, nil, &d.charge)
	}
	if !gave && l.settles(&d.charge.id) {
		l.giveBack(context.WithoutCancel(ctx), &d.charge, 0, nil)
	}
	d.charge.lim = nil
	d.Allowed, d.Outcome = false, OutcomeLimited
	d.RetryAfter = max(left, time.Millisecond).Truncate(time.Millisecond)
	l.cfg.rep.observer.Wait(d.Bucket, d.Waited, false)
}

// pastDeadline reports whether ctx's deadline has passed: a slot that
// begins now begins after it (one at the deadline is served: see await).
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Now().After(dl)
}

// giveUpLate ends d, admitted at once (no wait) by a store call that came
// back after its context's deadline: its slot began then, on this
// process's clock, and it gives up as a waiter whose slot begins after
// its deadline does (see giveUp): its charge goes back and d is limited,
// to come back at once.
func (l *Limiter) giveUpLate(ctx context.Context, d *Decision) {
	l.giveBack(context.WithoutCancel(ctx), &d.charge, d.charge.cost, nil)
	d.charge.lim = nil
	d.Allowed, d.Outcome = false, OutcomeLimited
	d.RetryAfter = time.Millisecond
}
