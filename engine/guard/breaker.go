package guard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// Circuit breaker of a guarded store, shared by every Limiter on the
// wrapper. Closed: every decision calls the store. It opens when
// the store has answered nothing for a whole store timeout (a call timed out
// and no call succeeded since it started: see deadline.go), or after
// breakerFailures consecutive failed calls of any kind. Open: the store is
// not called; the FailureMode decides at once. Once breakerCoolDown has
// passed since it opened (or since the last failed probe), the next decision
// is the probe: it calls the store while the others keep deciding by their
// FailureMode, one probe at a time. Any successful call closes it, the
// probe's or a straggler's that started before it opened.
//
// The schedule is fixed rather than growing: limiting resumes within a
// second of the store's return, and a probe costs one decision
// one store timeout at most, so 4 probes a second cost 4 requests in 800 a
// second (at 200 requests/s) the wait.
const (
	breakerFailures = 5
	breakerCoolDown = 250 * time.Millisecond
)

// Breaker states.
const (
	breakerClosed int32 = iota
	breakerOpen
	breakerProbing
)

// breakerVerdict is what allow says about one decision.
type breakerVerdict uint8

const (
	callStore breakerVerdict = iota // closed: call the store
	callProbe                       // open, cool-down over: this call is the probe
	skipStore                       // open, or another call is probing: do not call
)

type breaker struct {
	state       atomic.Int32
	failures    atomic.Int32 // consecutive failed calls while closed
	retryAt     atomic.Int64 // monotonic ns when the next probe may go (open)
	lastSuccess atomic.Int64 // monotonic ns of the latest successful call; never: none yet
	openedAt    atomic.Int64 // monotonic ns the breaker opened

	mu      sync.Mutex                // serialises opening
	skipErr atomic.Pointer[errHolder] // the error of skipped calls: ErrCircuitOpen wrapping the cause
}

type errHolder struct{ err error }

// never is lastSuccess before any call succeeded: far enough in the past
// that subtracting it from any clock reading cannot overflow.
const never = -1 << 62

// allow says whether a decision at now calls the store. A caller that
// cannot wait for an answer (probe false: its own deadline comes before
// the timeout) is never made the probe: its deadline, not the store, would
// decide the probe's outcome, and a stream of such callers would keep the
// breaker open over a healthy store.
func (b *breaker) allow(now int64, probe bool) breakerVerdict {
	switch b.state.Load() {
	case breakerClosed:
		return callStore
	case breakerOpen:
		if probe && now >= b.retryAt.Load() && b.state.CompareAndSwap(breakerOpen, breakerProbing) {
			return callProbe
		}
	}
	return skipStore
}

// succeeded records a successful call at now; true when it closed the
// breaker (a transition to report).
func (b *breaker) succeeded(now int64) bool {
	// One write per tick at most: the silence test of deadline.go has a
	// tick of slack, and a write per call would bounce the cache line
	// between cores.
	if now-b.lastSuccess.Load() >= tickNS {
		b.lastSuccess.Store(now)
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	for {
		s := b.state.Load()
		if s == breakerClosed {
			return false
		}
		if b.state.CompareAndSwap(s, breakerClosed) {
			return true
		}
	}
}

// failed records a failed call at now; silent reports that the call timed
// out with no successful call since it started (the store answered nothing
// for a whole store timeout), probe that it was the probe. It returns true
// when this failure opened a closed breaker (a transition to report); a
// failed probe re-opens it for another cool-down without a transition.
func (b *breaker) failed(now int64, silent, probe bool, err error) bool {
	if probe && b.state.CompareAndSwap(breakerProbing, breakerOpen) {
		b.retryAt.Store(now + int64(breakerCoolDown))
		return false
	}
	if b.state.Load() != breakerClosed {
		return false // already open: a straggler's failure
	}
	if n := b.failures.Add(1); !silent && n < breakerFailures {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.CompareAndSwap(breakerClosed, breakerOpen) {
		return false
	}
	b.skipErr.Store(&errHolder{fmt.Errorf("%w; it opened on: %w", limitstore.ErrCircuitOpen, err)})
	b.failures.Store(0)
	b.openedAt.Store(now)
	b.retryAt.Store(now + int64(breakerCoolDown))
	return true
}

// abandoned records that a call's caller went away before the store
// answered, probe reporting that the call was the probe: nothing was
// learned about the store, so a probe's breaker is open again and the next
// decision may probe at once (else it would stay probing, and skip every
// call, for good).
func (b *breaker) abandoned(now int64, probe bool) {
	if probe && b.state.CompareAndSwap(breakerProbing, breakerOpen) {
		b.retryAt.Store(now)
	}
}

// skipError is the error of a decision that did not call the store:
// ErrCircuitOpen wrapping the failure that opened the breaker.
func (b *breaker) skipError() error {
	if h := b.skipErr.Load(); h != nil {
		return h.err
	}
	return limitstore.ErrCircuitOpen
}
