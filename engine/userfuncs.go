package limit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
)

// This file runs the user-supplied functions of a Policy: Skip, KeyFunc,
// CostFunc, Plan, OnLimited, OnStoreError and LimitedResponse. Each is called
// synchronously and behind a recover, so that a bug in one of them costs at
// most its own effect, never a 500 or a crashed server. Every failure is
// reported as an Issue and logged at most once per 10 minutes per kind.

// skipped reports whether r is exempt: a CORS preflight (unless the policy
// limits preflights), a path in Policy.SkipPaths, or Policy.Skip's yes. A
// panicking Skip counts as false: a broken predicate must not switch the
// limiter off.
func (l *Limiter) skipped(r *Request) bool {
	if r.Method == http.MethodOptions && !l.policy.LimitPreflights && isPreflight(r) {
		return true
	}
	if l.skip != nil {
		if _, ok := l.skip[r.Path]; ok {
			return true
		}
	}
	if l.policy.Skip == nil {
		return false
	}
	return l.callSkip(r)
}

// isPreflight reports whether an OPTIONS request is a CORS preflight: it
// carries Access-Control-Request-Method (Fetch standard, "CORS-preflight
// request"). Only OPTIONS requests get here, so other requests never read
// the header.
func isPreflight(r *Request) bool {
	return r.Header != nil && len(r.Header.Values("Access-Control-Request-Method")) > 0
}

func (l *Limiter) callSkip(r *Request) (skip bool) {
	defer func() {
		if p := recover(); p != nil {
			skip = false
			l.cfg.rep.policyFuncFailed(l.shared.name, issueHookPanic, "Skip panicked; the request is limited as if it had returned false", p)
		}
	}()
	return l.policy.Skip(*r)
}

// callKeyFunc runs Policy.KeyFunc: a blank result or an error is "", a
// panic is recovered, reported and "" too (identity falls through).
func (l *Limiter) callKeyFunc(r *Request, bucket string) (id string) {
	defer func() {
		if p := recover(); p != nil {
			id = ""
			l.cfg.rep.policyFuncFailed(bucket, issueKeyFuncPanic, "KeyFunc panicked; identity falls through to the client address", p)
		}
	}()
	id, err := l.policy.KeyFunc(*r)
	if err != nil || strings.TrimSpace(id) == "" {
		return ""
	}
	return id
}

// cost returns the request's cost: Policy.CostFunc when set and positive,
// else Policy.Cost. A panicking CostFunc means Cost.
func (l *Limiter) cost(r *Request) (n int64) {
	if l.policy.CostFunc == nil {
		return l.res.cost
	}
	defer func() {
		if p := recover(); p != nil {
			n = l.res.cost
			l.cfg.rep.policyFuncFailed(l.shared.name, issueHookPanic, "CostFunc panicked; the request costs the policy's Cost", p)
		}
	}()
	if n = l.policy.CostFunc(*r); n <= 0 {
		n = l.res.cost
	}
	return n
}

// plan returns the plan of r: the one Policy.Plan names, or the default
// plan when there is no Plan function or it returns "". An error, a panic or
// a name not in Plans means the default plan too, reported as
// Issue "plan-fallback".
func (l *Limiter) plan(r *Request, bucket string) *plan {
	if l.policy.Plan == nil {
		return &l.res.plans[0]
	}
	name, p, err := l.callPlan(r)
	var why string
	switch {
	case p != nil:
		why = "Plan panicked"
	case err != nil:
		why = "Plan returned an error"
	case name == "" || name == l.policy.DefaultPlan:
		return &l.res.plans[0]
	default:
		if pl, ok := l.plans[name]; ok {
			return pl
		}
		why = "Plan returned a name that is neither a key of Plans nor DefaultPlan"
	}
	l.cfg.rep.policyFuncFailed(bucket, issuePlanFallback, why+"; the default plan applies", p)
	return &l.res.plans[0]
}

func (l *Limiter) callPlan(r *Request) (name string, panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			name, panicked, err = "", p, nil
		}
	}()
	name, err = l.policy.Plan(*r)
	return name, nil, err
}

// onLimited runs Policy.OnLimited, recovering a panic.
func (l *Limiter) onLimited(ctx context.Context, r *Request, d *Decision) {
	defer func() {
		if p := recover(); p != nil {
			l.cfg.rep.policyFuncFailed(d.Bucket, issueHookPanic, "OnLimited panicked; the request got its limited response as usual", p)
		}
	}()
	l.policy.OnLimited(ctx, *r, *d)
}

// onStoreError runs Policy.OnStoreError, recovering a panic.
func (l *Limiter) onStoreError(ctx context.Context, r *Request, bucket string, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.cfg.rep.policyFuncFailed(bucket, issueHookPanic, "OnStoreError panicked; the failure mode applies as usual", p)
		}
	}()
	l.policy.OnStoreError(ctx, *r, err)
}

// limitedResponse replaces the default response in resp with
// Policy.LimitedResponse's result, or keeps it (and reports
// Issue "limited-response-fallback") when the builder panics, returns nil or
// returns a Status outside 400-599.
func (l *Limiter) limitedResponse(ctx context.Context, r *Request, resp *response) {
	lr, p := l.callLimitedResponse(ctx, r, resp.Decision)
	var why string
	switch {
	case p != nil:
		why = "LimitedResponse panicked"
	case lr == nil:
		why = "LimitedResponse returned nil"
	case lr.Status != 0 && (lr.Status < 400 || lr.Status > 599):
		why = "LimitedResponse returned Status " + strconv.Itoa(lr.Status) + ", outside 400-599"
	}
	if why != "" {
		l.cfg.rep.policyFuncFailed(resp.Decision.Bucket, issueLimitedResponseFallback, why+"; the default response was sent", p)
		return
	}
	resp.replace(lr)
}

func (l *Limiter) callLimitedResponse(ctx context.Context, r *Request, d Decision) (lr *LimitedResponse, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			lr, panicked = nil, p
		}
	}()
	return l.policy.LimitedResponse(ctx, *r, d), nil
}
