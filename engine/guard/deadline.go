package guard

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// The store timeout without a context per call, and what it measures.
//
// context.WithTimeout per store call costs 6 allocations (the context, its
// timer, the channel, the cancel closure). Instead, calls to one store that
// start within the same tick (1 ms) share one deadline: a done channel and
// one timer, created by the first caller of the tick. Each call's context is
// a pooled storeCtx: it answers Done and Err from the shared deadline and
// Value from the caller's context (so tracing and other request values still
// reach the store), and it is never cancelled by the caller (a client that
// goes away gets the same decision as one that stays).
//
// What the timeout measures. A call fails when the store has answered
// nothing at all for the store timeout while the call waited: then it is
// hung or gone, and the circuit breaker opens at once (breaker.go). While
// the store answers other calls, a call keeps waiting for its own answer, up
// to twice the timeout: its reply is late because of queueing (its command
// waited in the client's pipeline behind a burst, the process had no CPU
// for its goroutine), not because the store is down. A burst of 200 calls
// on two cores can put its commands on the wire 4-14 ms after the calls
// started, so replies a store sent 90 ms after receiving them arrive
// 100-113 ms after the calls began: failing those at a 100 ms timeout would
// let FailOpen admit what the store had denied. The time a request spent
// before the store call is never part of it.
const (
	tickNS = int64(time.Millisecond)
	// lateAnswerFactor bounds the wait of a call whose store answers other
	// calls: lateAnswerFactor store timeouts from its start.
	lateAnswerFactor = 2
	// silenceGrace is how long a silence found at a check is confirmed
	// before the calls fail (see check): a call to a store that answers
	// nothing fails at the store timeout + 1 tick + silenceGrace, within
	// 10 ms of the timeout.
	silenceGrace = 4 * time.Millisecond
	// watchAfter is how long a call waits before its caller's cancellation
	// is watched (see storeCtx): a call that returns sooner costs nothing
	// for it, and a caller that goes away is released at most watchAfter
	// after the call began, at once when it leaves later.
	watchAfter = 10 * time.Millisecond
)

// tickSource hands out the shared deadlines of one store under one timeout.
type tickSource struct {
	timeout int64 // ns
	store   *Store
	cur     atomic.Pointer[deadline]
}

// get returns the deadline of a call starting at now: the current tick's,
// or a new one. A deadline is never earlier than now + timeout, and at most
// one tick later.
func (ts *tickSource) get(now int64) *deadline {
	d := ts.cur.Load()
	if d != nil && now >= d.start && now < d.start+tickNS {
		return d
	}
	nd := newDeadline(ts, now)
	if !ts.cur.CompareAndSwap(d, nd) {
		// Another caller started a tick meanwhile; use it when it serves
		// this call too, else ours (its timer runs all the same).
		if w := ts.cur.Load(); w != nil && now >= w.start && now < w.start+tickNS {
			nd.stop()
			return w
		}
	}
	return nd
}

// deadline is the timeout shared by the calls that start in one tick.
type deadline struct {
	src   *tickSource
	start int64     // monotonic ns: the tick's start (no call of it started earlier)
	at    time.Time // nominal deadline: start + tick + timeout
	done  chan struct{}
	timer *time.Timer // the first timer's (look's, or the first check's); only stopped, by get
	// why is 0 while done is open, then whyStoreSilent (the store answered
	// nothing for a whole timeout) or whyTooLate (the store answered others
	// but not this call within lateAnswerFactor timeouts).
	why atomic.Int32
	// suspect is when check found the store silent (0: it did not), since
	// the instant no success came after; read and written by check only.
	suspect, since int64
	// first is when the first check looks for a silence; the first timer
	// fires earlier, at watchAfter, for look.
	first int64
	// watched holds the calls of the tick that watch their caller (a list
	// through storeCtx.next, pushed by begin), until look takes them
	// (watchedTaken); kept, those look found still waiting, until close.
	// looked and kept are read and written by check only.
	watched atomic.Pointer[storeCtx]
	kept    *storeCtx
	looked  bool
}

// watchedTaken is what deadline.watched holds once look took the list: a
// call that begins later keeps the tick's own Done channel.
var watchedTaken = new(storeCtx)

const (
	whyStoreSilent int32 = 1 + iota
	whyTooLate
)

func newDeadline(ts *tickSource, now int64) *deadline {
	d := &deadline{src: ts, start: now, done: make(chan struct{})}
	first := now + tickNS + ts.timeout
	d.at = monoStart.Add(time.Duration(first))
	d.first = first
	d.timer = time.AfterFunc(time.Duration(min(first-now, int64(watchAfter))), d.check)
	return d
}

// check runs when a timer fires: it closes done when the store has been
// silent for a whole timeout or the calls have waited lateAnswerFactor
// timeouts, and otherwise sets a timer for the earliest instant one of those
// can become true (only while the store answers others but not these calls:
// one more timer, rarely).
//
// Silent means no successful call since the tick started (at the first
// check) or within the last timeout (later), with a tick of slack for the
// success clock, which is written at most once per tick (breaker.succeeded):
// a success at x leaves lastSuccess > x - tick, so no live store is ever
// taken for a silent one. Silence found is confirmed silenceGrace later (no
// success since the same instant) before the calls fail: a success is
// recorded by the goroutine that made the call once it runs again, and on a
// process short of CPU (a burst of goroutines on two cores) that can come a
// few milliseconds after the store's reply did, which a timer that fires on
// time would take for silence.
//
// The checks of one deadline run one after the other (each sets at most one
// timer for the next), so the suspicion fields need no lock.
func (d *deadline) check() {
	sh, to := d.src.store, d.src.timeout
	now := sh.now()
	if !d.looked {
		d.look()
		if now < d.first {
			time.AfterFunc(time.Duration(d.first-now), d.check)
			return
		}
	}
	last := sh.breaker.lastSuccess.Load()
	limit := d.start + tickNS + lateAnswerFactor*to
	if d.suspect != 0 { // confirming a silence found silenceGrace ago
		if last < d.since {
			d.close(whyStoreSilent)
			return
		}
		d.suspect = 0
	} else if since := max(d.start, now-to-tickNS) - tickNS; last < since {
		d.suspect, d.since = now, since
		time.AfterFunc(silenceGrace, d.check)
		return
	}
	if now >= limit {
		d.close(whyTooLate)
		return
	}
	next := min(limit, last+to+3*tickNS)
	time.AfterFunc(time.Duration(max(next-now, tickNS)), d.check)
}

func (d *deadline) close(why int32) {
	if d.why.CompareAndSwap(0, why) {
		close(d.done)
		if !d.looked {
			d.look()
		}
		for sc := d.kept; sc != nil; sc = sc.next {
			if sc.state.CompareAndSwap(scKept, scTimedOut) {
				close(sc.own)
			}
		}
		d.kept = nil
	}
}

// look runs once per deadline, watchAfter after its tick began (or at its
// close, if that comes first): the calls of the tick that are over go back
// to the pool; for each still waiting, a caller already gone releases it
// now, and otherwise context.AfterFunc will when its caller goes away (an
// allocation, for calls that waited watchAfter only); those are kept for
// close, and never pooled again.
func (d *deadline) look() {
	d.looked = true
	next := d.watched.Swap(watchedTaken)
	for sc := next; sc != nil; sc = next {
		next, sc.next = sc.next, nil
		if sc.state.CompareAndSwap(scEnded, scShared) {
			sc.parent = nil
			d.src.store.ctxs.Put(sc)
			continue
		}
		if !sc.state.CompareAndSwap(scWatched, scLooking) {
			continue // not a state a listed call can be in
		}
		parent := sc.parent
		if parent.Err() != nil {
			sc.state.Store(scReleased)
			close(sc.own)
			continue
		}
		if parent.Done() != nil {
			sc.stop = context.AfterFunc(parent, sc.release) // stopped by end
		}
		sc.state.Store(scKept)
		sc.next, d.kept = d.kept, sc
	}
}

// stop releases an unused deadline's timer.
func (d *deadline) stop() { d.timer.Stop() }

// storeCtx is the context of one store call: Done, Err and Deadline come
// from the shared deadline, Value from the caller's context. It is pooled,
// so passing it as a context.Context allocates nothing.
//
// The caller's cancellation. A store that waits on its context asks for
// Done (rueidis does when it has sent a command, the Redis store when an
// Op is queued); a store that never waits never asks. The first Done of a
// call whose caller's context was not done when the call began returns a
// channel of the call's own (own, made with the pooled value) and puts the
// call on its deadline's list (one compare-and-swap). watchAfter after the
// tick began the deadline looks at the list: a call that is over goes back
// to the pool; for one still waiting, context.AfterFunc closes own when
// the caller goes away (at once if it has), and Err then reports
// errCallerGone: the store returns, and the guard releases the caller. own
// is closed with the shared deadline too. So a call that returns within
// watchAfter pays a push at most, and only a call that waits longer pays
// the AfterFunc (stopped when the call returns; its storeCtx is then left
// to the garbage collector). A
// caller whose context was done before the call (a client that
// half-closed its connection) is not released: it gets the store's
// decision, as a caller that stays.
//
// A store's client may leave a goroutine behind that still watches the
// context after Take returned: rueidis does when it waits for a pooled
// connection (context.WithCancelCause, whose watcher reads Done later). So
// the deadline is an atomic pointer, and once the call is over (cleared, d
// nil) the context reads as done: Done is closed, Err is
// context.DeadlineExceeded; until a later call takes the storeCtx from the
// pool, after which such a watcher reads that call's context instead: it
// then waits as that call would (on a shared deadline, or the later call's
// own channel) and cancels nothing of it, since the Take it watched is
// over. Not pooling would cost an allocation per call. Value must not be
// called after Take returned
// (it reads the caller's context, which the next decision replaces); no
// client does.
type storeCtx struct {
	parent context.Context
	d      atomic.Pointer[deadline]
	own    chan struct{} // Done of a watched call; closed only for a call never pooled again
	state  atomic.Int32  // scShared, ...
	next   *storeCtx     // in its deadline's list (watched, then kept)
	stop   func() bool   // a kept call's AfterFunc's; set by look before scKept
}

// storeCtx states. A call begins scShared (its Done is the tick's: the
// caller's cancellation is not watched) or scFresh (watched once the store
// asks for Done: scWatched, on its deadline's list; a Done asked after
// the deadline looked is the tick's, scShared). look takes a watched call
// that is over (scEnded) back to the pool, or keeps one still waiting
// (scLooking, then scKept), which ends scReleased (its caller went away),
// scTimedOut (the deadline closed) or scKeptEnded (the call returned),
// whichever comes first.
const (
	scShared int32 = iota
	scFresh
	scWatched
	scEnded
	scLooking
	scKept
	scReleased
	scTimedOut
	scKeptEnded
)

// begin makes sc the context of a call under d on behalf of parent; watch
// false: the caller's cancellation is not watched.
func (sc *storeCtx) begin(parent context.Context, d *deadline, watch bool) {
	sc.parent = parent
	sc.d.Store(d)
	if watch && parent.Err() == nil {
		sc.state.Store(scFresh)
	} else {
		sc.state.Store(scShared) // the store's decision, as for a caller that stays
	}
}

// watch puts a fresh call on d's list, the first time its store asks for
// Done, and returns its Done channel.
func (sc *storeCtx) watch(d *deadline) <-chan struct{} {
	if !sc.state.CompareAndSwap(scFresh, scWatched) {
		return sc.Done() // another Done, or end, came first
	}
	for {
		head := d.watched.Load()
		if head == watchedTaken { // look has run: a call that waited only later
			if sc.state.CompareAndSwap(scWatched, scShared) {
				return d.done
			}
			return closedChan // over meanwhile (end left it to the garbage collector)
		}
		sc.next = head
		if d.watched.CompareAndSwap(head, sc) {
			return sc.own
		}
	}
}

// released reports whether the caller went away while the call waited
// (and the call was released).
func (sc *storeCtx) released() bool { return sc.state.Load() == scReleased }

// release is the AfterFunc of a kept call's caller.
func (sc *storeCtx) release() {
	for sc.state.Load() == scLooking {
		runtime.Gosched() // look has not marked it kept yet
	}
	if sc.state.CompareAndSwap(scKept, scReleased) {
		close(sc.own)
	}
}

// unwatch stops a kept call's AfterFunc, so that a caller's context that
// outlives many calls (a worker's) does not keep one per slow call.
func (sc *storeCtx) unwatch() {
	if sc.stop != nil {
		sc.stop()
		sc.stop = nil
	}
}

// end marks the call over and drops the caller's context (the pool must not
// keep it alive). It reports whether sc may go back to the pool now: a
// watched call's goes back when its deadline looks at it, a kept call's
// never.
func (sc *storeCtx) end() bool {
	sc.d.Store(nil)
	for {
		switch sc.state.Load() {
		case scShared:
			sc.parent = nil
			return true
		case scFresh:
			if sc.state.CompareAndSwap(scFresh, scShared) {
				sc.parent = nil
				return true
			}
		case scWatched:
			if sc.state.CompareAndSwap(scWatched, scEnded) {
				return false // look reads parent and pools it
			}
		case scLooking:
			runtime.Gosched() // look is reading parent
		case scKept:
			if sc.state.CompareAndSwap(scKept, scKeptEnded) {
				sc.parent = nil
				sc.unwatch()
				return false
			}
		default: // released, timed out
			sc.parent = nil
			sc.unwatch()
			return false
		}
	}
}

// closedChan is the Done channel of a call that is over.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Deadline reports the nominal deadline (call start + timeout, rounded up
// to the tick): a store that sets its own I/O deadline from it times out
// there. Done may close later while the store answers other calls (see the
// comment at the top of this file).
func (c *storeCtx) Deadline() (time.Time, bool) {
	if d := c.d.Load(); d != nil {
		return d.at, true
	}
	return time.Time{}, true // over: a deadline long past
}

func (c *storeCtx) Done() <-chan struct{} {
	d := c.d.Load()
	if d == nil {
		return closedChan
	}
	switch c.state.Load() {
	case scShared:
		return d.done
	case scFresh:
		return c.watch(d)
	}
	return c.own
}

func (c *storeCtx) Err() error {
	d := c.d.Load()
	if d == nil {
		return context.DeadlineExceeded
	}
	switch c.state.Load() {
	case scShared, scFresh:
		if d.why.Load() != 0 {
			return context.DeadlineExceeded
		}
	case scReleased:
		return errCallerGone
	case scTimedOut:
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers from the caller's context, except the key by which
// context.Cause and context.WithCancel find a cancellable parent: the store
// call is not cancelled with the caller, so that parent must not be found
// (context.WithoutCancel does the same).
func (c *storeCtx) Value(key any) any {
	if key == cancelCtxKey {
		return nil
	}
	return c.parent.Value(key)
}

// cancelCtxKey is the key context.Cause asks a done Context for to find its
// cancellable parent (an unexported variable of package context; also how
// context.WithCancel finds one), learnt once by asking context.Cause about a
// done context that records the question. Without it, Cause of a store
// context that timed out would report the caller's cancellation cause.
// TestStoreCtxHidesTheCallersCancellation pins it.
var cancelCtxKey = func() any {
	var p keyProbe
	_ = context.Cause(&p)
	return p.key
}()

type keyProbe struct{ key any }

func (*keyProbe) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*keyProbe) Done() <-chan struct{}       { return nil }
func (*keyProbe) Err() error                  { return context.Canceled } // Cause asks Value only of a done context
func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}
