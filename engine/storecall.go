package limit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StoreInfo is what a Store tells the engine about itself: a Store that has
// a method
//
//	Describe() StoreInfo
//
// is asked once, in New (and With). A Store without it, and the zero value,
// describe a store that does I/O, labelled "custom".
type StoreInfo struct {
	// Name is the store label of metrics ("memory", "redis"); "" means
	// "custom".
	Name string
	// InProcess reports that Take never waits on I/O (the memory store): the
	// engine calls it without arming the store timeout, which would cost a
	// timer per decision, and without a circuit breaker or a local deny
	// cache.
	InProcess bool
	// InjectedClock reports that Take decides at a clock the caller
	// injected (a test's fake clock: the stores' WithClock) rather than at
	// real time. The engine then keeps no local deny cache for the store:
	// its entries count down on the process's monotonic clock, which a fake
	// clock need not follow.
	InjectedClock bool
}

// describer is the optional interface of a Store that describes itself
// (see StoreInfo).
type describer interface {
	Describe() StoreInfo
}

// storeRef is a Store with its description read once, at New, and what
// every Limiter on it shares (storeShared: breaker, deny cache, liveness).
type storeRef struct {
	Store
	info   StoreInfo
	shared *storeShared
	ticks  *tickSource // the deadlines of calls under this config's timeout; nil in-process
}

func newStoreRef(s Store, timeout time.Duration) storeRef {
	r := storeRef{Store: s}
	if d, ok := s.(describer); ok {
		r.info = d.Describe()
	}
	if r.info.Name == "" {
		r.info.Name = "custom"
	}
	r.shared = sharedFor(s, r.info)
	if r.shared.io {
		r.ticks = r.shared.tickSource(timeout)
	}
	return r
}

// storeCall is the store call of one policy with its failure mode, and
// everything that stands between a decision and the store: for a store that
// does I/O, the local deny cache (denycache.go), the circuit breaker
// (breaker.go) and the store timeout on a deadline shared by calls that
// start close together (deadline.go); for every store, a recovered panic
// counted as a failure and one duration event per call. On a failure the
// policy's FailureMode decides.
type storeCall struct {
	primary   storeRef
	local     storeRef // WithLocalStore's store (FailLocal), or none
	mode      FailureMode
	observing bool // an Observer is set: time the calls
	rep       *reporter
}

// newStoreCall builds the store call of a policy with FailureMode mode on
// s under cfg. The storeRefs are built once per New and kept in cfg, so the
// Limiters from With reuse them; separately built Limiters on one Store
// meet in the registry of storeshared.go.
func newStoreCall(s Store, cfg *config, mode FailureMode) storeCall {
	if cfg.primary.Store == nil {
		cfg.primary = newStoreRef(s, cfg.storeTimeout)
		if cfg.localStore != nil {
			cfg.local = newStoreRef(cfg.localStore, cfg.storeTimeout)
		}
	}
	return storeCall{primary: cfg.primary, local: cfg.local, mode: mode, observing: cfg.rep.observing, rep: cfg.rep}
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

// failClosedRetryAfter is the Retry-After of a FailClosed 503: the outage's
// length is unknown, so clients come back soon and meet either the recovered
// store or another 503.
const failClosedRetryAfter = time.Second

// decide asks the store about op and writes its answer into d, which holds
// the Decision's other fields already; on a failure the FailureMode decides
// and the failed calls are reported. sc is the decision's store context
// (pooled with op). The error, when not nil, is the store failure (for
// OnStoreError and Consume's caller): never "limited".
func (c *storeCall) decide(ctx context.Context, sc *storeCtx, op *Op, bucket string, d *Decision) error {
	res, err := c.take(ctx, sc, &c.primary, op)
	if err == nil {
		d.fill(&res)
		return nil
	}
	d.StoreFailed = true
	switch c.mode {
	case FailLocal:
		var lerr error
		if res, lerr = c.take(ctx, sc, &c.local, op); lerr == nil {
			d.fill(&res)
			if d.Allowed {
				d.Outcome = OutcomeDegraded
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
	// While the breaker is open its transition line has said it all; the
	// rate-limited line is for failures of a store that otherwise answers.
	c.rep.storeFailure(bucket, c.mode, err, !c.primary.shared.breaker.isOpen())
	return err
}

// take asks one store about op. An in-process store is called straight
// (timed only when an Observer is set). A store that does I/O is asked
// only when its deny cache has no answer and its breaker lets the call
// through, under the shared deadline; its answer feeds the breaker and the
// deny cache. Exactly one duration event per call made, a failed or
// panicking one included; none for a call not made.
func (c *storeCall) take(ctx context.Context, sc *storeCtx, s *storeRef, op *Op) (Result, error) {
	if s.ticks == nil {
		if !c.observing {
			return c.call(ctx, s, op)
		}
		start := time.Now()
		res, err := c.call(ctx, s, op)
		c.rep.storeDuration(s.info.Name, time.Since(start))
		return res, err
	}
	sh := s.shared
	now := sh.now()
	if op.Refund {
		sh.deny.drop(op)
	} else if res, ok := sh.deny.lookup(op, now); ok {
		c.rep.storeSkipped(s.info.Name, skipDenyCache)
		return res, nil
	}
	verdict := sh.breaker.allow(now)
	if verdict == skipStore {
		c.rep.storeSkipped(s.info.Name, skipBreakerOpen)
		return Result{}, sh.breaker.skipError()
	}
	dl := s.ticks.get(now)
	// The store call is detached from the caller's cancellation and bounded
	// by the store timeout alone: a client that cancels its request (closes
	// its side of the connection) must get the same decision as one that
	// does not. Were its cancellation to fail the store call, the failure
	// mode would decide instead, and FailOpen would admit every such client.
	sc.begin(ctx, dl)
	res, err := c.call(sc, s, op)
	sc.end()
	end := sh.now()
	if c.observing {
		c.rep.storeDuration(s.info.Name, time.Duration(end-now))
	}
	if err == nil {
		if sh.breaker.succeeded(end) {
			c.rep.storeRecovered(s.info.Name, time.Duration(end-sh.breaker.openedAt.Load()))
		}
		sh.deny.store(op, &res, now, end)
		return res, nil
	}
	silent := dl.why.Load() == whyStoreSilent
	if sh.breaker.failed(end, silent, verdict == callProbe, err) {
		c.rep.storeOpened(s.info.Name, silent, err)
	}
	return res, err
}

// call runs Store.Take with a recovered panic, which is a store failure
// like any other: its error says "limit: store panicked: " and the value.
func (c *storeCall) call(ctx context.Context, s *storeRef, op *Op) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limit: store panicked: %v", p)
		}
	}()
	return s.Take(ctx, op)
}
