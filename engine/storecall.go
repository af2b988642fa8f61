package limit

import (
	"context"
	"errors"
	"fmt"
	"github.com/quotagate/quotagate/engine/limitstore"
	"time"
)

// describer is the optional interface of a Store that describes itself
// (see limitstore.Info).
type describer interface {
	Describe() limitstore.Info
}

// storeRef is a Store with its name read once, at New.
type storeRef struct {
	limitstore.Store
	name string
}

func newStoreRef(s limitstore.Store) storeRef {
	r := storeRef{Store: s, name: "custom"}
	if d, ok := s.(describer); ok {
		if n := d.Describe().Name; n != "" {
			r.name = n
		}
	}
	return r
}

// storeCall is the store call of one policy with its failure mode: a
// recovered panic counted as a failure, one duration event per call made,
// and on a failure the policy's FailureMode. What protects a store that does
// I/O (a timeout, a circuit breaker, a deny cache) is the store's own
// (package guard), never the engine's.
type storeCall struct {
	primary   storeRef
	local     storeRef // WithLocalStore's store (FailLocal), or none
	mode      FailureMode
	observing bool // an Observer is set: time the calls
	rep       *reporter
	// base is the start of the calls' clock (start): a monotonic reading
	// taken once, so that timing a call reads the clock twice, where
	// time.Now and time.Since would read it three times (the wall clock too).
	base time.Time
}

// newStoreCall builds the store call of a policy with FailureMode mode on
// s under cfg. The storeRefs are built once per New and kept in cfg, so the
// Limiters from With reuse them.
func newStoreCall(s limitstore.Store, cfg *config, mode FailureMode) storeCall {
	if cfg.primary.Store == nil {
		cfg.primary = newStoreRef(s)
		if cfg.localStore != nil {
			cfg.local = newStoreRef(cfg.localStore)
		}
	}
	return storeCall{primary: cfg.primary, local: cfg.local, mode: mode, observing: cfg.rep.observing, rep: cfg.rep, base: time.Now()}
}

// failureModeName is the Go name of m, for error messages.
func failureModeName(m FailureMode) string {
	switch m {
	case FailOpen:
		return "FailOpen (the default)"
	case FailLocal:
		return "FailLocal"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailureMode(%d)", int(m))
}

// callerEnded reports whether err, a failed store call's, is the end of
// the caller's own context: cancelled, or past its deadline (a deadline
// that has passed counts even before its context's timer has fired: a
// guarded store refuses such a call at once). A store's own timeout, under
// a caller whose context goes on, is not; nor is a call an open circuit
// breaker did not make (limitstore.ErrCircuitOpen), whatever the failure
// that opened it: the caller's context had no part in it, and the decision
// is the FailureMode's, as for every caller while the breaker is open.
func callerEnded(ctx context.Context, err error) bool {
	if (!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)) || errors.Is(err, limitstore.ErrCircuitOpen) {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// failClosedRetryAfter is the Retry-After of a FailClosed 503: the outage's
// length is unknown, so clients come back soon and meet either the recovered
// store or another 503.
const failClosedRetryAfter = time.Second

// decide asks the store about op and writes its answer into d, which holds
// the Decision's other fields already; on a failure the FailureMode decides
// and the failed calls are reported. The error, when not nil, is the store failure (for
// OnStoreError and Consume's caller): never "limited". res receives the
// store's Result (the caller's scratch: off the stack under the store call).
func (c *storeCall) decide(ctx context.Context, op *limitstore.Op, bucket string, d *Decision, res *limitstore.Result) error {
	err := c.take(ctx, &c.primary, op, res)
	if err == nil {
		d.fill(res)
		return nil
	}
	d.StoreFailed = true
	if callerEnded(ctx, err) {
		// The caller went away, or its deadline passed, while the store
		// was asked (or before): nothing is admitted whatever the failure
		// mode, so that cancelling a request or sending a deadline too
		// short for the store cannot make FailOpen admit it, and it is not
		// the store's failure.
		d.Outcome = OutcomeLimited
		d.RetryAfter = failClosedRetryAfter
		return err
	}
	switch c.mode {
	case FailLocal:
		var lerr error
		op.WaitMS = 0 // no request waits on a fallback's word (MaxWait)
		if lerr = c.take(ctx, &c.local, op, res); lerr == nil {
			d.fill(res)
			if d.Allowed {
				d.Outcome = OutcomeDegraded
				d.charge.local = true // Finish gives it back there
			}
			break
		}
		c.rep.storeFailure(bucket, c.mode, lerr, true) // a failed call of its own
		err = errors.Join(err, fmt.Errorf("limit: FailLocal's local store failed too: %w", lerr))
		d.Allowed, d.Outcome = true, OutcomeDegraded // the local store failed too: fail open
	case FailOpen:
		d.Allowed, d.Outcome = true, OutcomeDegraded
	case FailClosed:
		d.Outcome = OutcomeLimited
		d.RetryAfter = failClosedRetryAfter
	}
	// While a breaker is open its transition line has said it all; the
	// rate-limited line is for failures of a store that otherwise answers.
	c.rep.storeFailure(bucket, c.mode, err, !errors.Is(err, limitstore.ErrCircuitOpen))
	return err
}

// take asks one store about op and writes its Result into *res, timed
// when an Observer is set: exactly one duration event per call made, a
// failed or panicking one included; none for a call the store's
// protections did not make (a cached denial, an open breaker: the store
// reports those itself). The store writes its Result straight into *res.
func (c *storeCall) take(ctx context.Context, s *storeRef, op *limitstore.Op, res *limitstore.Result) error {
	if !c.observing {
		return call(ctx, s, op, res)
	}
	start := c.start()
	err := call(ctx, s, op, res)
	c.timed(s.name, "take", start, err)
	return err
}

// start is the instant a store call starts, for timed: the monotonic time
// since c.base.
func (c *storeCall) start() time.Duration { return time.Since(c.base) }

// timed reports the duration of one store call of operation op that
// started at start (c.start), unless the store's open breaker refused it
// (err wraps limitstore.ErrCircuitOpen).
func (c *storeCall) timed(store, op string, start time.Duration, err error) {
	if c.observing && (err == nil || !errors.Is(err, limitstore.ErrCircuitOpen)) {
		c.rep.storeDuration(store, op, c.start()-start)
	}
}

// call runs Store.Take with a recovered panic, which is a store failure
// like any other: its error says "limit: store panicked: " and the value.
// The Result goes into *res.
func call(ctx context.Context, s *storeRef, op *limitstore.Op, res *limitstore.Result) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limit: store panicked: %v", p)
		}
	}()
	return s.Take(ctx, op, res)
}
