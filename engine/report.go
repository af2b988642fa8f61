package limit

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// reporter is the one place the engine reports from: every Observer event
// and every log line of the request path goes through its methods, and each
// log line is rate-limited here (store failures at most once per 10 s, each
// Issue kind at most once per 10 minutes). It is built by New and shared,
// read-only but for its gates, by the Limiters derived with With.
type reporter struct {
	observer  Observer // guarded (a panic drops the event); nopObserver when none
	observing bool     // an Observer was set: store calls are timed, Check emits events
	logger    *slog.Logger
	now       func() time.Time // the log gates' clock; nil: time.Now (tests set a fake)
	store     logGate
	issues    [issueKinds]logGate
}

// Log periods: store failures at most once per storeLogEvery, each Issue kind
// at most once per issueLogEvery.
const (
	storeLogEvery = 10 * time.Second
	issueLogEvery = 10 * time.Minute
)

func newReporter(c *config) *reporter {
	_, nop := c.observer.(nopObserver)
	return &reporter{observer: c.observer, observing: !nop, logger: c.logger}
}

// decision emits the event of one decided request (never of a skipped one):
// bucket, the handler label, the key source and d's outcome. The event is
// built only when there is an Observer to receive it.
func (r *reporter) decision(bucket, handler string, src KeySource, d *Decision) {
	if r.observing {
		r.observer.Decision(DecisionEvent{Bucket: bucket, Handler: handler, Outcome: d.Outcome, KeySource: src, Plan: d.Plan, Blocked: d.Blocked})
	}
}

// storeDuration emits the duration of one store call.
func (r *reporter) storeDuration(store, op string, d time.Duration) {
	r.observer.StoreDuration(store, op, d)
}

// storeFailure reports one failed store call (or one not made, the
// breaker being open): an event every time; when logIt, a log line at most
// once per 10 s. Failures of a store whose breaker is open are not logged
// here: its transitions are (storeOpened, storeRecovered), each once, so an
// outage is logged when it starts whatever was logged before it.
func (r *reporter) storeFailure(bucket string, mode FailureMode, err error, logIt bool) {
	r.observer.StoreError(bucket, mode)
	if logIt && r.store.allow(r.clock(), storeLogEvery) {
		r.logger.Warn("quotagate: store call failed; applying the failure mode (further isolated failures are not logged for 10s)",
			slog.String("bucket", bucket), slog.String("failure_mode", mode.String()), slog.String("error", sanitize(err.Error())))
	}
}

// issue reports a client-address or route issue: an event every time, a
// log line at most once per 10 minutes per kind.
func (r *reporter) issue(bucket string, kind Issue) {
	r.observer.Issue(bucket, kind)
	if r.allowIssue(kind) {
		msg := "quotagate: " + string(kind) + " (this kind is logged at most once per 10 minutes)"
		if kind == issueRouteUnknown {
			msg = "quotagate: route-unknown: a PerRoute policy is mounted where the router has not matched a route yet, " +
				"so every such request counts in its Shared bucket: mount it at route level (the adapter's documentation names the way) " +
				"(logged at most once per 10 minutes)"
		}
		r.logger.Warn(msg, slog.String("bucket", bucket), slog.String("issue", string(kind)))
	}
}

// trustIssue reports a trusted-header issue: an event every time, a log
// line at most once per 10 minutes per kind, naming the header and quoting a
// bounded, sanitised piece of the offending text.
func (r *reporter) trustIssue(bucket string, t *trustConfig, ca clientAddr) {
	r.observer.Issue(bucket, ca.issue)
	if !r.allowIssue(ca.issue) {
		return
	}
	msg := "quotagate: trusted-header-missing: the trusted header was absent or held fewer hops than configured; keyed on the socket peer (this kind is logged at most once per 10 minutes)"
	if ca.issue == issueTrustedHeaderUnusable {
		msg = "quotagate: trusted-header-unusable: the trusted header held no usable address at the hop read; keyed on the nearest trusted address (this kind is logged at most once per 10 minutes)"
	}
	attrs := []slog.Attr{
		slog.String("bucket", sanitize(bucket)),
		slog.String("issue", string(ca.issue)),
		slog.String("header", t.header),
	}
	if t.mode == trustHeader {
		attrs = append(attrs, slog.Int("hops", t.hops))
	}
	if ca.detail != "" {
		attrs = append(attrs, slog.String("entry", sanitize(ca.detail)))
	}
	r.logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// policyFuncFailed reports the failure of a user-supplied policy function:
// an Issue event every time, a log line at most once per 10 minutes per
// kind. p is the recovered panic value, or nil.
func (r *reporter) policyFuncFailed(bucket string, kind Issue, msg string, p any) {
	r.observer.Issue(bucket, kind)
	if !r.allowIssue(kind) {
		return
	}
	attrs := []any{slog.String("bucket", bucket), slog.String("issue", string(kind))}
	if p != nil {
		attrs = append(attrs, slog.String("panic", sanitize(fmt.Sprint(p))))
	}
	r.logger.Error("quotagate: "+msg+" (logged at most once per 10 minutes)", attrs...)
}

// nativeMismatch reports a typed KeyFunc, CostFunc or Plan (KeyFuncOf,
// CostFuncOf, PlanFuncOf)
// that met a Request whose Native is another framework's type: an Issue
// event every time, a log line naming both types at most once per 10
// minutes. The types are formatted only when the line is logged.
func (r *reporter) nativeMismatch(bucket, fn string, want reflect.Type, got any) {
	r.observer.Issue(bucket, issueNativeMismatch)
	if !r.allowIssue(issueNativeMismatch) {
		return
	}
	r.logger.Error(fmt.Sprintf("quotagate: native-mismatch: a typed %s expects Request.Native to be %v but it is %T: "+
		"the function belongs to another framework's adapter and was not called (logged at most once per 10 minutes)", fn, want, got),
		slog.String("bucket", bucket), slog.String("issue", string(issueNativeMismatch)))
}

func (r *reporter) clock() int64 {
	if r.now != nil {
		return r.now().UnixNano()
	}
	return time.Now().UnixNano()
}

func (r *reporter) allowIssue(kind Issue) bool {
	return r.issues[kind.index()].allow(r.clock(), issueLogEvery)
}

// logGate lets one log line through per period, lock-free.
type logGate struct{ last atomic.Int64 }

// allow reports whether a line may be logged at now (Unix ns): the first
// call, and then the first call at least every after the last admitted one.
// Of concurrent callers exactly one wins.
func (g *logGate) allow(now int64, every time.Duration) bool {
	last := g.last.Load()
	if last != 0 && now-last < int64(every) {
		return false
	}
	return g.last.CompareAndSwap(last, now)
}

// sanitize makes untrusted text safe for a log line: it is cut to 200 bytes
// and every rune that is not printable (C0 and C1 controls, DEL, line and
// paragraph separators, bidirectional and other format characters, invalid
// UTF-8) becomes '?'.
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}
