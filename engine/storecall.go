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
	// timer per decision.
	InProcess bool
}

// describer is the optional interface of a Store that describes itself
// (see StoreInfo).
type describer interface {
	Describe() StoreInfo
}

// storeRef is a Store with its description read once, at New.
type storeRef struct {
	Store
	info StoreInfo
}

func newStoreRef(s Store) storeRef {
	r := storeRef{Store: s}
	if d, ok := s.(describer); ok {
		r.info = d.Describe()
	}
	if r.info.Name == "" {
		r.info.Name = "custom"
	}
	return r
}

// storeCall is the store call of one policy with its failure mode: the
// shared store under the store timeout, a recovered panic counted as a
// failure, one duration event per call; on a failure the policy's
// FailureMode decides. Everything that stands between a decision and the
// store (a circuit breaker, a local deny cache, a timeout without a per-call
// allocation) belongs here.
type storeCall struct {
	primary   storeRef
	local     storeRef // WithLocalStore's store (FailLocal), or none
	timeout   time.Duration
	mode      FailureMode
	observing bool // an Observer is set: time the calls
	rep       *reporter
}

// failClosedRetryAfter is the Retry-After of a FailClosed 503: the outage's
// length is unknown, so clients come back soon and meet either the recovered
// store or another 503.
const failClosedRetryAfter = time.Second

// decide asks the store about op and writes its answer into d, which holds
// the Decision's other fields already; on a failure the FailureMode decides
// and the failed calls are reported. The error, when not nil, is the store
// failure (for OnStoreError and Consume's caller): never "limited".
func (c *storeCall) decide(ctx context.Context, op *Op, bucket string, d *Decision) error {
	res, err := c.take(ctx, &c.primary, op)
	if err == nil {
		d.fill(&res)
		return nil
	}
	d.StoreFailed = true
	switch c.mode {
	case FailLocal:
		var lerr error
		if res, lerr = c.take(ctx, &c.local, op); lerr == nil {
			d.fill(&res)
			if d.Allowed {
				d.Outcome = OutcomeDegraded
			}
			break
		}
		c.rep.storeFailure(bucket, c.mode, lerr) // a failed call of its own
		err = errors.Join(err, fmt.Errorf("limit: FailLocal's local store failed too: %w", lerr))
		d.Allowed, d.Outcome = true, OutcomeDegraded // the local store failed too: fail open
	case FailOpen:
		d.Allowed, d.Outcome = true, OutcomeDegraded
	case FailClosed:
		d.Outcome = OutcomeLimited
		d.RetryAfter = failClosedRetryAfter
	}
	c.rep.storeFailure(bucket, c.mode, err)
	return err
}

// take calls one store and reports the call's duration: exactly one
// duration event per call, a failed or panicking one included. With no
// Observer set it does not read the clock.
func (c *storeCall) take(ctx context.Context, s *storeRef, op *Op) (Result, error) {
	if !c.observing {
		return c.call(ctx, s, op)
	}
	start := time.Now()
	res, err := c.call(ctx, s, op)
	c.rep.storeDuration(s.info.Name, time.Since(start))
	return res, err
}

// call runs Store.Take with a recovered panic (reported as ErrStorePanic)
// and, for stores that do I/O, under the store timeout.
func (c *storeCall) call(ctx context.Context, s *storeRef, op *Op) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrStorePanic, p)
		}
	}()
	if s.info.InProcess {
		return s.Take(ctx, op)
	}
	// The store call is detached from the caller's cancellation and bounded
	// by the store timeout alone: a client that cancels its request (closes
	// its side of the connection) must get the same decision as one that
	// does not. Were its cancellation to fail the store call, the failure
	// mode would decide instead, and FailOpen would admit every such client.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	return s.Take(tctx, op)
}
