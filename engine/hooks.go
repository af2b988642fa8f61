package limit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
)

// This file runs the user-supplied functions of a Policy that shape the
// response: Skip, OnLimited, OnStoreError and DenyResponse. Each is called
// synchronously and behind a recover, so that a bug in one of them costs at
// most its own effect, never a 500 or a crashed server. Every failure is
// reported to the Observer as an Issue and logged at most once per 10
// minutes per kind.

// Denial is what Policy.DenyResponse returns: the response to a denied
// request in place of the default RFC 9457 problem body.
//
// The engine keeps the fields it owns: Retry-After and the RateLimit fields,
// as the policy's Disclosure and HeaderStyle say, and Cache-Control:
// no-store. Header fields are applied after them and replace engine fields
// of the same name (they are set, not added). The default Content-Type goes
// with the default body: set one in Header when Body needs it.
type Denial struct {
	// Status is the status code, 400-599; 0 keeps the default (429, or 503
	// when FailClosed rejected on a store failure).
	Status int
	// Header holds extra header fields; nil for none. It is read, never
	// modified, and may be shared between calls.
	Header http.Header
	// Body is the response body; nil for none. It may be shared between
	// calls and must not be modified afterwards.
	Body []byte
}

// skipped reports whether Policy.SkipPaths or Policy.Skip exempt r. A
// panicking Skip counts as false: a broken predicate must not switch the
// limiter off.
func (l *Limiter) skipped(r *Request) bool {
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

func (l *Limiter) callSkip(r *Request) (skip bool) {
	defer func() {
		if p := recover(); p != nil {
			skip = false
			l.policyFuncFailed(l.shared, IssueSkipPanic, "Skip panicked; the request is limited as if it had returned false", p)
		}
	}()
	return l.policy.Skip(*r)
}

// onLimited runs Policy.OnLimited, recovering a panic.
func (l *Limiter) onLimited(ctx context.Context, r *Request, d *Decision) {
	defer func() {
		if p := recover(); p != nil {
			l.policyFuncFailed(d.Bucket, IssueHookPanic, "OnLimited panicked; the request got its denial as usual", p)
		}
	}()
	l.policy.OnLimited(ctx, *r, *d)
}

// onStoreError runs Policy.OnStoreError, recovering a panic.
func (l *Limiter) onStoreError(ctx context.Context, r *Request, bucket string, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.policyFuncFailed(bucket, IssueHookPanic, "OnStoreError panicked; the failure mode applies as usual", p)
		}
	}()
	l.policy.OnStoreError(ctx, *r, err)
}

// denyResponse replaces the default denial in resp with Policy.DenyResponse's
// result, or keeps it (and reports IssueDenyResponseFallback) when the
// builder panics, returns nil or returns a Status outside 400-599.
func (l *Limiter) denyResponse(ctx context.Context, r *Request, resp *Response) {
	den, p := l.callDeny(ctx, r, resp.Decision)
	var why string
	switch {
	case p != nil:
		why = "DenyResponse panicked"
	case den == nil:
		why = "DenyResponse returned nil"
	case den.Status != 0 && (den.Status < 400 || den.Status > 599):
		why = "DenyResponse returned Status " + strconv.Itoa(den.Status) + ", outside 400-599"
	}
	if why != "" {
		l.policyFuncFailed(resp.Decision.Bucket, IssueDenyResponseFallback, why+"; the default denial was sent", p)
		return
	}
	if den.Status != 0 {
		resp.Status = den.Status
	}
	resp.Body = den.Body
	resp.DenialHeader = den.Header
	resp.drop(HeaderContentType)
}

func (l *Limiter) callDeny(ctx context.Context, r *Request, d Decision) (den *Denial, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			den, panicked = nil, p
		}
	}()
	return l.policy.DenyResponse(ctx, *r, d), nil
}

// policyFuncFailed reports the failure of a user-supplied policy function:
// an Issue event every time, a log line at most once per 10 minutes per
// kind. p is the recovered panic value, or nil.
func (l *Limiter) policyFuncFailed(bucket string, kind Issue, msg string, p any) {
	l.cfg.observer.ClientAddressIssue(bucket, kind)
	if !l.cfg.gates.allowIssue(kind) {
		return
	}
	attrs := []any{slog.String("bucket", bucket), slog.String("issue", string(kind))}
	if p != nil {
		attrs = append(attrs, slog.String("panic", sanitize(fmt.Sprint(p))))
	}
	l.cfg.logger.Error("quotagate: "+msg+" (logged at most once per 10 minutes)", attrs...)
}
