package limit

import "time"

// Issue names a reported problem; it is the kind label of
// quotagate_issues_total. The set holds client-address and route problems
// and the failures of user-supplied policy functions (KeyFunc, Skip, Plan,
// hooks, LimitedResponse), which are recovered rather than turned into a
// 500. Each kind is logged at most once per 10 minutes. The kinds:
//   - "trusted-header-missing": a trusted header is configured but the
//     request did not carry it (or carried fewer hops than the chain needs);
//   - "trusted-header-unusable": the trusted header held no usable address
//     at the hop it was read from;
//   - "no-client-address": no identity could be derived; the request used
//     the shared fallback bucket;
//   - "route-unknown": a PerRoute policy saw no matched route template and
//     fell back to the Shared bucket;
//   - "key-func-panic": Policy.KeyFunc panicked; identity fell through;
//   - "hook-panic": Policy.Skip, CostFunc, OnLimited, OnStoreError or
//     CountStatus panicked and the request went on as each field's doc says;
//   - "limited-response-fallback": Policy.LimitedResponse panicked, returned
//     nil or a Status outside 400-599; the default response was sent;
//   - "native-mismatch": a typed KeyFunc, CostFunc or Plan (KeyFuncOf,
//     CostFuncOf, PlanFuncOf) met a Request whose Native is another
//     framework's type, so it was not called;
//   - "plan-fallback": Policy.Plan returned an error, panicked or named a
//     plan that is neither a key of Policy.Plans nor Policy.DefaultPlan; the
//     default plan decided.
type Issue string

// The Issue kinds (see Issue).
const (
	issueTrustedHeaderMissing    Issue = "trusted-header-missing"
	issueTrustedHeaderUnusable   Issue = "trusted-header-unusable"
	issueNoClientAddress         Issue = "no-client-address"
	issueRouteUnknown            Issue = "route-unknown"
	issueKeyFuncPanic            Issue = "key-func-panic"
	issueHookPanic               Issue = "hook-panic"
	issueLimitedResponseFallback Issue = "limited-response-fallback"
	issueNativeMismatch          Issue = "native-mismatch"
	issuePlanFallback            Issue = "plan-fallback"
)

// issueKinds is the number of log gates: one per Issue kind, one for
// unknown kinds.
const issueKinds = 10

// index is the kind's log gate.
func (i Issue) index() int {
	switch i {
	case issueTrustedHeaderMissing:
		return 0
	case issueTrustedHeaderUnusable:
		return 1
	case issueNoClientAddress:
		return 2
	case issueRouteUnknown:
		return 3
	case issueKeyFuncPanic:
		return 4
	case issueHookPanic:
		return 5
	case issueLimitedResponseFallback:
		return 6
	case issueNativeMismatch:
		return 7
	case issuePlanFallback:
		return 8
	}
	return 9
}

// DecisionEvent describes one decision for an Observer. Every field comes from
// configuration or a closed set: never the identity, the raw path or a header.
type DecisionEvent struct {
	// Bucket is the bucket name ("100p60", "/v1/notes/{id} 5p60f", a Name).
	Bucket string
	// Handler is the router's own route spelling, "" when unknown or for
	// Consume.
	Handler string
	// Outcome is allowed, limited, degraded or shadow-limited.
	Outcome Outcome
	// KeySource is where the identity came from.
	KeySource KeySource
	// Plan is the plan that decided (Decision.Plan): a key of Policy.Plans,
	// Policy.DefaultPlan, or "".
	Plan string
	// Blocked reports a request limited by a block (Policy.BlockFor,
	// Decision.Blocked); its Outcome is limited, or shadow-limited under
	// Shadow.
	Blocked bool
}

// The reasons of a refund (Observer.Refund).
const (
	// RefundLaterMount: a later mount on the same request limited it, so
	// this mount's charge was given back (stacked mounts).
	RefundLaterMount = "later-mount"
	// RefundStatus: Policy.CountStatus did not count the status the
	// handler wrote.
	RefundStatus = "status"
)

// Observer receives the engine's events, synchronously on the request path:
// implementations must be fast, must not block, and must be safe for
// concurrent use. The engine passes only strings it already holds (no event
// allocates) and takes no lock around the calls. The metrics/prometheus
// module (promlimit) implements it.
type Observer interface {
	// Decision is called once per decided request (not for skipped ones).
	Decision(e DecisionEvent)
	// Issue is called once per request that met the issue.
	Issue(bucket string, kind Issue)
	// Refund is called once per request whose charge Limiter.Finish gave
	// back to the store, with the bucket and the reason (RefundLaterMount
	// or RefundStatus): such a request was counted as allowed by Decision
	// and did not, in the end, draw on the bucket's allowance. A refund the
	// store failed is not one (the request stays counted; StoreError reports
	// the failure).
	Refund(bucket, reason string)
	// StoreError is called once per failed store call (an error, a timeout
	// or a panic) and once per call not made because the store's circuit
	// breaker is open (the FailureMode decided either way), with the
	// failing policy's FailureMode: under FailLocal a request whose local
	// store fails too reports two.
	StoreError(bucket string, mode FailureMode)
	// Wait is called once per request that reserved a slot and waited for
	// it (Policy.MaxWait), with the bucket and the time it waited: served
	// is true when it was admitted at its slot, false when its context
	// ended first and it gave the slot back (the request is then limited).
	Wait(bucket string, waited time.Duration, served bool)
	// StoreDuration is called after every store call, failed ones included
	// (not for a call a guarded store's open breaker refused), with the
	// store's name (limitstore.Info.Name; "custom" when the store does not
	// describe itself) and the operation: "take" (a decision or a refund),
	// "peek" (Limiter.Peek), "reset" (Limiter.Reset), or for a
	// Concurrency policy "acquire" (a slot taken or renewed) and "release".
	StoreDuration(store, op string, d time.Duration)
	// StoreEvent is called by a guarded store (package guard: the Redis
	// store is one) given this Observer, never by the engine, with the
	// store's name and one of four events of its protections:
	//   - "deny-cache", once per decision the store would have made but its
	//     local deny cache answered with the store's own earlier denial;
	//   - "breaker-open", once per decision the store was not asked because
	//     its circuit breaker is open (the FailureMode decided);
	//   - "opened", once when the circuit breaker opens;
	//   - "closed", once when it closes again (a call succeeded).
	StoreEvent(store, event string)
}

// nopObserver is the default Observer.
type nopObserver struct{}

func (nopObserver) Decision(DecisionEvent)                      {}
func (nopObserver) Issue(string, Issue)                         {}
func (nopObserver) Refund(string, string)                       {}
func (nopObserver) StoreError(string, FailureMode)              {}
func (nopObserver) Wait(string, time.Duration, bool)            {}
func (nopObserver) StoreDuration(string, string, time.Duration) {}
func (nopObserver) StoreEvent(string, string)                   {}

// guardedObserver recovers a panic of the wrapped Observer (an event is lost,
// the request is not); a deferred call costs no allocation.
type guardedObserver struct{ o Observer }

func dropPanic() { _ = recover() }

func (g guardedObserver) Decision(e DecisionEvent) {
	defer dropPanic()
	g.o.Decision(e)
}

func (g guardedObserver) Issue(bucket string, kind Issue) {
	defer dropPanic()
	g.o.Issue(bucket, kind)
}

func (g guardedObserver) Refund(bucket, reason string) {
	defer dropPanic()
	g.o.Refund(bucket, reason)
}

func (g guardedObserver) StoreError(bucket string, mode FailureMode) {
	defer dropPanic()
	g.o.StoreError(bucket, mode)
}

func (g guardedObserver) Wait(bucket string, waited time.Duration, served bool) {
	defer dropPanic()
	g.o.Wait(bucket, waited, served)
}

func (g guardedObserver) StoreDuration(store, op string, d time.Duration) {
	defer dropPanic()
	g.o.StoreDuration(store, op, d)
}

func (g guardedObserver) StoreEvent(store, event string) {
	defer dropPanic()
	g.o.StoreEvent(store, event)
}
