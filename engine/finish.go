package limit

import (
	"context"
	"errors"
	"github.com/quotagate/quotagate/engine/limitstore"
	"net/http"
)

// This file settles a request after its handler: a charge is
// given back when a later mount on the same request limited it (stacked
// mounts: a limited request charges no mount), or when the policy does not
// count the status the handler wrote (Policy.CountStatus). The refund is one
// Op with Refund set through the same store call as the charge (storecall.go);
// a guarded store also drops its cached denials of the keys.

// charge is what an admitted request took from the store, kept in its
// Decision (the request's ticket) so that Finish can give it back: the key
// is rebuilt from the bucket and identity (nothing is copied on the allowed
// path), and the windows the cost counted in make the refund exact (a
// refund never revives a window that has rolled or expired), as the
// epochs of the states it counted in do across a Reset (a refund never
// goes to the identity's usage after it).
type charge struct {
	lim     *Limiter // the Limiter that charged; nil: nothing to give back
	local   bool     // FailLocal's local store took it, not the shared one
	settled bool     // its lease is settled already: its Refund settles nothing
	bucket  bucketRef
	id      who
	set     *quotaSet // the quotas (of the plan) that charged it
	cost    int64
	windows [limitstore.MaxQuotas]int64 // QuotaResult.Window of each quota (filled by Decision.fill)
	epochs  [limitstore.MaxQuotas]int64 // QuotaResult.Epoch of each quota: a Reset since gives nothing back
	lease   int64                       // Result.Lease: the lease period of the unsettled charge (Limiter.settles)
	mark    limitMark                   // the request's "limited by a mount" flag; nil: none reachable
}

// limitMark is a per-request flag that every mount on one request sees: a
// mount that limits the request sets it, and the mounts that charged it
// earlier read it when their handler returns (Finish) and give their charge
// back. For net/http requests it lives in the request's header map (see
// headerMark); a ResponseWriter given to Check may carry it (see
// ResponseWriter).
type limitMark interface {
	SetLimited()
	Limited() bool
}

// markField is the request header field name of the net/http flag. It
// contains a space, which RFC 9110 field names cannot: net/http's server
// (and fasthttp's) refuses such a line from a client (400), and it is never
// written on the wire.
const markField = "Quotagate limited"

// markValue is the flag's value, and what makes it the engine's: Limited
// accepts only this very slice (its backing array), so a field of the same
// name that reached the map another way (a middleware or transport copying
// fields from elsewhere into r.Header) is not the flag.
var markValue = []string{"1"}

// headerMark is the flag kept in an *http.Request's header map, which the
// request's shallow copies (WithContext, the routers' own copies) share.
type headerMark http.Header

func (h headerMark) SetLimited() { h[markField] = markValue }

func (h headerMark) Limited() bool {
	v := h[markField]
	return len(v) == 1 && &v[0] == &markValue[0]
}

// markOf returns the flag of a net/http request's header map (nil: none).
func markOf(h http.Header) limitMark {
	if h == nil {
		return nil
	}
	return headerMark(h)
}

// settle records the flag on d after Check or CheckHTTP: a limited request
// sets it (so that earlier mounts give their charges back), an admitted one
// keeps it in its charge for Finish, unless it is set already: a flag set
// before this mount charged belongs to an earlier request that handed on
// its header map (an in-process dispatcher serving sub-requests on shallow
// copies, a reused http.Header), not to a mount after this one, so it
// refunds nothing.
func settle(d *Decision, m limitMark) {
	if m == nil {
		return
	}
	if !d.Allowed {
		m.SetLimited()
		return
	}
	if d.charge.lim != nil && !m.Limited() {
		d.charge.mark = m
	}
}

// Finish settles a request once its handler has answered: d is the
// Decision that Check or CheckHTTP returned for it (its ticket; also one of
// Consume or ConsumeN) and status the response status the handler wrote (0
// when unknown). It gives the request's cost back to the store when
//   - a later mount on the same request limited it (stacked mounts: a
//     limited request charges no mount; the limiting mount flags the
//     request, see ResponseWriter), or
//   - Policy.CountStatus is set and does not count status.
//
// A policy with both CountStatus and BlockFor keeps every admitted
// request's charge unsettled in the store until its Finish (at most for
// twice Policy.Lease, see there), since a denial that finds the quota spent
// while a charge is unsettled begins no block (the charge may be given
// back); so Finish settles such a charge in one store call whatever the
// status: given back, or counted and nothing given back.
//
// A Concurrency Decision's slots are given back in any case (one store
// call; a copy of the Decision finished again gives back nothing).
// Otherwise, and for a Decision that took nothing (limited, skipped,
// decided by the FailureMode), it does nothing and costs nothing. The refund is one
// store call, on those requests only; it gives back only what is still
// there (never a count below zero, never a window that has rolled or
// expired: see Op.Refund) and, when the store fails, the request stays
// counted (reported as a store error, decided by no FailureMode: over-denial,
// never over-admission). Finish is called at most once per Decision: it
// clears d's charge. The adapters of this project call it after the next
// handler; a handler that panics never reaches it, so the request stays
// counted. Safe for concurrent use.
func (l *Limiter) Finish(ctx context.Context, d *Decision, status int) {
	if d.slot != nil && d.slot.lim == l {
		l.releaseSlot(ctx, d)
	}
	c := &d.charge
	if c.lim != l {
		return
	}
	c.lim = nil
	reason := ""
	if c.mark != nil && c.mark.Limited() {
		reason = RefundLaterMount
	} else if status > 0 && l.policy.CountStatus != nil && !l.countStatus(status) {
		reason = RefundStatus
	}
	if reason == "" {
		if l.settles(&c.id) {
			l.giveBack(ctx, c, 0, nil) // counted: settled, nothing given back
		}
		return
	}
	if l.giveBack(ctx, c, c.cost, nil) {
		l.store.rep.observer.Refund(c.bucket.name, reason)
	}
}

// giveBack gives cost of charge c back, in one Refund Op, to the store
// that took it (the shared one, or FailLocal's local store; the windows
// and epochs of the charge make it exact), settling the charge when the
// store keeps it unsettled (its lease period in Op.Block.Lease, unless
// c.settled; cost 0 settles a counted charge and gives nothing back), and
// reports whether the store took it back, its answer in *res (nil: not
// wanted); a failure is reported as a store error (unless ctx ended: see
// callerEnded) and the charge stays counted (and unsettled until its
// lease ends).
func (l *Limiter) giveBack(ctx context.Context, c *charge, cost int64, res *limitstore.Result) bool {
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	op, over, _ := l.op(sc, &c.bucket, &c.id, c.set, cost)
	if over {
		return false
	}
	op.Refund, op.Block.Lease = true, c.lease
	if c.settled {
		op.Block.LeaseMS, op.Block.PendingKey = 0, nil
	}
	for i := range min(op.N, limitstore.MaxQuotas) {
		op.Quotas[i].Window, op.Quotas[i].Epoch = c.windows[i], c.epochs[i]
	}
	ref := &l.store.primary
	if c.local {
		ref = &l.store.local
	}
	if res == nil {
		res = new(limitstore.Result)
	}
	if err := l.store.take(ctx, ref, op, res); err != nil {
		if !callerEnded(ctx, err) { // a caller that left is no store failure
			l.store.rep.storeFailure(c.bucket.name, l.store.mode, err, !errors.Is(err, limitstore.ErrCircuitOpen))
		}
		return false
	}
	return true
}

// countStatus runs Policy.CountStatus; a panic counts the request.
func (l *Limiter) countStatus(status int) (counts bool) {
	defer func() {
		if p := recover(); p != nil {
			counts = true
			l.cfg.rep.policyFuncFailed(l.shared.name, issueHookPanic, "CountStatus panicked; the request stays counted", p)
		}
	}()
	return l.policy.CountStatus(status)
}
