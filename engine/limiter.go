package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Request is the framework-agnostic view of one HTTP request that adapters
// build. Strings must stay valid for the duration of the call (fiber adapters
// copy theirs first); the engine keeps none of them afterwards.
type Request struct {
	// Route is the matched route template in the router's own spelling
	// ("/v1/notes/{id}", "/v1/notes/:id", "GET /v1/notes/{id}"), "" when no
	// route is known. The engine normalises it to "{param}" form for PerRoute
	// buckets and uses it verbatim as the handler metrics label.
	Route string
	// Method is the request method. It never selects a bucket.
	Method string
	// Path is the request path. It never selects a bucket.
	Path string
	// Peer is the socket peer, "ip:port", "[ipv6%zone]:port" or a bare
	// address; "" when unknown.
	Peer string
	// Header gives access to request headers; nil means none. It is read only
	// for configured trusted headers.
	Header Header
	// Native is the framework's own request or context (*http.Request,
	// echo.Context, *gin.Context, *fiber.Ctx) for typed key functions.
	Native any
}

// Header is read access to request header lines. http.Header implements it.
// Values returns every line of the named header, in order.
type Header interface {
	Values(name string) []string
}

var _ Header = http.Header(nil)

// Decision is the engine's answer for one request or Consume call.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Outcome is allowed, limited, degraded, or skipped (Check only).
	Outcome Outcome
	// StoreFailed reports that the shared store failed (error, timeout or
	// panic) and the policy's FailureMode decided: FailOpen admits (Outcome
	// degraded); FailLocal admits (degraded) or denies (limited) by the
	// local store's numbers; FailClosed rejects with 503 (limited).
	StoreFailed bool
	// Limit is the quota per window of the policy that decided (reduced for
	// the fallback bucket).
	Limit int64
	// Remaining is how many more cost-1 requests would be admitted now;
	// never negative; 0 when no store decided (FailOpen, FailClosed).
	Remaining int64
	// ResetAfter is the time until the whole quota is back (FixedWindow: the
	// end of the window); 0 when no store decided.
	ResetAfter time.Duration
	// RetryAfter is, when denied, the earliest time after which the same
	// request will be admitted with no further traffic (1 s under
	// FailClosed); 0 when allowed.
	RetryAfter time.Duration
	// ResetAt is the store's clock reading plus ResetAfter; the zero Time
	// when no store decided.
	ResetAt time.Time
	// Bucket is the bucket name.
	Bucket string
	// KeySource is where the identity came from.
	KeySource KeySource
	// Policy is the deciding policy (read-only).
	Policy *Policy

	// numbers reports that a store (the shared one, or FailLocal's local
	// one) produced Remaining, ResetAfter and ResetAt, so that they may be
	// disclosed in RateLimit header fields.
	numbers bool
}

// ConsumeCall is the Request.Native that hooks receive for Consume and
// ConsumeN calls, which have no HTTP request: every other Request field is
// empty. Identity is the identity the caller passed ("" for the fallback
// bucket) and Cost the cost decided.
type ConsumeCall struct {
	Identity string
	Cost     int64
}

// Limiter applies one Policy through one Store. It is safe for concurrent use
// and is meant to be created once and shared (by several mounts too: every
// mount of one Limiter draws on the same buckets).
type Limiter struct {
	store     Store
	policy    Policy
	res       resolved
	cfg       *config
	shared    string    // the Shared-scope bucket: Name or signature
	sharedRef bucketRef // shared with its hash
	primary   storeRef  // the store, with what take needs to know about it
	local     storeRef  // WithLocalStore's store (FailLocal), or none
	observing bool      // an Observer is set: time store calls
	plainV4   bool      // IPv4 peers key as their own text: /32, no hashing, no trusted header
	routes    routeCache
	headers   headerSet
	body429   []byte              // the default 429 problem body, with ProblemType
	skip      map[string]struct{} // Policy.SkipPaths; nil when empty
	scratch   sync.Pool
}

// scratch is per-call working memory, pooled so that the allowed path does not
// allocate: the Op handed to the store lives here, with the key bytes.
type scratch struct {
	op  Op
	key []byte
	id  []byte
}

// New returns a Limiter for policy p on store s. Zero Policy fields take
// their defaults (Limit 100, Window 60 s, SlidingWindow). Errors wrap
// ErrInvalidPolicy or ErrInvalidOption and name the field or option.
func New(s Store, p Policy, opts ...Option) (*Limiter, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidOption)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(cfg); err != nil {
			return nil, err
		}
	}
	return newLimiter(s, p, cfg)
}

// MustNew is New for package-level variables; it panics on error.
func MustNew(s Store, p Policy, opts ...Option) *Limiter {
	l, err := New(s, p, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// With returns a Limiter for policy p that shares this Limiter's store and
// options: the way to apply another policy (a per-route mount, a Consume call
// site with its own quota) under the same process-wide settings.
func (l *Limiter) With(p Policy) (*Limiter, error) {
	return newLimiter(l.store, p, l.cfg)
}

func newLimiter(s Store, p Policy, cfg *config) (*Limiter, error) {
	res, err := p.resolve()
	if err != nil {
		return nil, err
	}
	if p.FailureMode == FailLocal && cfg.localStore == nil {
		return nil, fmt.Errorf("%w: FailureMode FailLocal needs a per-process store: pass WithLocalStore", ErrInvalidPolicy)
	}
	l := &Limiter{store: s, policy: p, res: res, cfg: cfg}
	l.plainV4 = cfg.ipv4Bits == 32 && !cfg.hashKeys && cfg.trust.mode == trustNone
	l.shared = res.signature
	if p.Name != "" {
		l.shared = p.Name
	}
	l.sharedRef = newBucketRef(l.shared)
	l.primary, l.local = newStoreRef(s), newStoreRef(cfg.localStore)
	_, nop := cfg.observer.(nopObserver)
	l.observing = !nop
	l.headers = newHeaderSet(l.shared, res)
	l.body429 = problemBody(p.ProblemType, http.StatusTooManyRequests)
	if len(p.SkipPaths) > 0 {
		l.skip = make(map[string]struct{}, len(p.SkipPaths))
		for _, path := range p.SkipPaths {
			l.skip[path] = struct{}{}
		}
	}
	l.scratch.New = func() any { return &scratch{key: make([]byte, 0, 128), id: make([]byte, 0, 64)} }
	return l, nil
}

// Policy returns the Limiter's policy as given to New.
func (l *Limiter) Policy() Policy { return l.policy }

// NeedsRoute reports whether anything reads Request.Route: a PerRoute
// bucket, the handler label when an Observer is set, or a policy function
// that receives the Request (KeyFunc, CostFunc, Skip, OnLimited,
// OnStoreError, DenyResponse). Adapters use it to skip an expensive route
// lookup that nothing would read.
func (l *Limiter) NeedsRoute() bool {
	_, nop := l.cfg.observer.(nopObserver)
	p := &l.policy
	return (p.Scope == PerRoute && p.Name == "") || !nop ||
		p.KeyFunc != nil || p.CostFunc != nil || p.Skip != nil ||
		p.OnLimited != nil || p.OnStoreError != nil || p.DenyResponse != nil
}

// Check decides one HTTP request and returns what the adapter must write: the
// Decision, the header fields to set on the response (allowed or not), and,
// when Denied, the status and body to send instead of calling the handler.
//
// In order: SkipPaths and Skip (a skipped request returns at once, Outcome
// OutcomeSkipped, nothing counted or reported); bucket, identity and cost;
// the store call under the store timeout; on a store failure the count, the
// rate-limited log line and OnStoreError; the Decision event; the header
// fields; when denied, OnLimited and then DenyResponse. Hooks run
// synchronously on the calling goroutine.
//
// It never panics on request input or in user-supplied functions, and never
// blocks longer than the store timeout plus the time user functions take.
// At the default disclosure an allowed request allocates nothing.
func (l *Limiter) Check(ctx context.Context, r Request) (resp Response) {
	// resp is the named result, written in place: no copy of the ~500-byte
	// Response on return.
	if l.skipped(&r) {
		resp.Decision = Decision{Allowed: true, Outcome: OutcomeSkipped, Policy: &l.policy}
		return resp
	}
	sc := l.scratch.Get().(*scratch)
	bref := l.bucket(&r)
	bucket := bref.name
	src := l.identity(&r, bucket, sc)
	cost := l.cost(&r)
	err := l.decide(ctx, sc, bref, src, cost, &resp.Decision)
	l.scratch.Put(sc)
	if err != nil {
		l.storeFailed(ctx, &r, bucket, err)
	}
	if l.observing {
		l.cfg.observer.Decision(DecisionEvent{Bucket: bucket, Handler: r.Route, Outcome: resp.Decision.Outcome, KeySource: src})
	}
	l.respond(&resp)
	if resp.Denied() {
		if l.policy.OnLimited != nil {
			l.onLimited(ctx, &r, &resp.Decision)
		}
		if l.policy.DenyResponse != nil {
			l.denyResponse(ctx, &r, &resp)
		}
	}
	return resp
}

// Consume decides one call of a non-HTTP call site for identity, at the
// policy's Cost. See ConsumeN.
func (l *Limiter) Consume(ctx context.Context, identity string) (Decision, error) {
	return l.ConsumeN(ctx, identity, 0)
}

// ConsumeN decides one call of cost n (n <= 0: the policy's Cost) for
// identity, in the bucket named by Policy.Name or else the signature. A blank
// identity draws on the shared fallback bucket. The Decision already applies
// the FailureMode; the error is the store failure, if any, for callers that
// want to log it (it never means "denied"). Events are emitted as for Check,
// with an empty handler. OnStoreError and OnLimited are called as for Check,
// with a Request whose Native is a ConsumeCall; SkipPaths, Skip and
// DenyResponse do not apply.
func (l *Limiter) ConsumeN(ctx context.Context, identity string, n int64) (Decision, error) {
	sc := l.scratch.Get().(*scratch)
	src := KeySourceConsume
	blank := strings.TrimSpace(identity) == ""
	if blank {
		src = KeySourceFallback
		l.issue(l.shared, IssueNoClientAddress)
	}
	if blank {
		sc.id = appendFallback(sc.id[:0])
	} else {
		sc.id = l.appendIdentity(sc.id[:0], identity)
	}
	cost := l.res.cost
	if n > 0 {
		cost = n
	}
	var d Decision
	err := l.decide(ctx, sc, l.sharedRef, src, cost, &d)
	l.scratch.Put(sc)
	var r Request
	if (err != nil && l.policy.OnStoreError != nil) || (!d.Allowed && l.policy.OnLimited != nil) {
		r.Native = ConsumeCall{Identity: identity, Cost: cost}
	}
	if err != nil {
		l.storeFailed(ctx, &r, l.shared, err)
	}
	l.cfg.observer.Decision(DecisionEvent{Bucket: l.shared, Outcome: d.Outcome, KeySource: src})
	if !d.Allowed && l.policy.OnLimited != nil {
		l.onLimited(ctx, &r, &d)
	}
	return d, err
}

// cost returns the request's cost: Policy.CostFunc when set and positive,
// else Policy.Cost.
func (l *Limiter) cost(r *Request) (n int64) {
	if l.policy.CostFunc == nil {
		return l.res.cost
	}
	defer func() {
		if recover() != nil {
			n = l.res.cost
		}
	}()
	if n = l.policy.CostFunc(*r); n <= 0 {
		n = l.res.cost
	}
	return n
}

// decide builds the Op in sc (identity already in sc.id), asks the store and
// writes the Decision into d (in place: no copy of the struct), applying the
// FailureMode on error.
func (l *Limiter) decide(ctx context.Context, sc *scratch, bucket bucketRef, src KeySource, cost int64, d *Decision) error {
	op := &sc.op
	*op = Op{Cost: cost, N: 1}
	q := &op.Quotas[0]
	q.Algorithm, q.Limit, q.WindowMS, q.Burst = l.policy.Algorithm, l.res.limit, l.res.windowMS, l.res.burst
	if src == KeySourceFallback {
		// Tightened, but never below the policy's Cost: a capacity under it
		// would deny every request without a client address for ever.
		if q.Algorithm == TokenBucket {
			q.Burst = max(l.res.cost, q.Burst/l.cfg.fallbackDivisor)
		} else {
			q.Limit = max(l.res.cost, q.Limit/l.cfg.fallbackDivisor)
		}
	}
	op.Cost = min(op.Cost, q.capacity()+1) // above capacity: denied; keeps products exact
	sc.key, _, q.PhaseMS = l.appendKey(sc.key[:0], bucket, sc.id)
	q.Key = sc.key
	*d = Decision{Limit: q.Limit, Bucket: bucket.name, KeySource: src, Policy: &l.policy}

	res, err := l.take(ctx, &l.primary, op)
	if err != nil {
		d.StoreFailed = true
		switch l.policy.FailureMode {
		case FailLocal:
			var lerr error
			if res, lerr = l.take(ctx, &l.local, op); lerr == nil {
				d.fill(res)
				if d.Allowed {
					d.Outcome = OutcomeDegraded
				}
				return err
			}
			l.countStoreFailure(bucket.name, lerr) // a failed call of its own; the caller counts err
			err = errors.Join(err, fmt.Errorf("limit: FailLocal's local store failed too: %w", lerr))
			fallthrough // the local store failed too: fail open
		case FailOpen:
			d.Allowed, d.Outcome = true, OutcomeDegraded
		case FailClosed:
			d.Outcome = OutcomeLimited
			d.RetryAfter = failClosedRetryAfter
		}
		return err
	}
	d.fill(res)
	return nil
}

// failClosedRetryAfter is the Retry-After of a FailClosed 503: the outage's
// length is unknown, so clients come back soon and meet either the recovered
// store or another 503.
const failClosedRetryAfter = time.Second

// fill writes a store's Result into d: the numbers of the quota closest to
// exhaustion (the least Remaining), and for a denial the latest Retry-After
// of the quotas that deny.
func (d *Decision) fill(res Result) {
	d.Allowed = res.Allowed
	d.Outcome = OutcomeLimited
	if res.Allowed {
		d.Outcome = OutcomeAllowed
	}
	n := min(max(res.N, 1), MaxQuotas)
	q := &res.Quotas[0]
	var retry int64
	for i := range n {
		qi := &res.Quotas[i]
		if qi.Remaining < q.Remaining {
			q = qi
		}
		if !res.Allowed && !qi.Allowed {
			retry = max(retry, qi.RetryAfterMS)
		}
	}
	d.Remaining = max(q.Remaining, 0)
	d.ResetAfter = time.Duration(q.ResetAfterMS) * time.Millisecond
	d.RetryAfter = time.Duration(retry) * time.Millisecond
	d.ResetAt = time.UnixMilli(res.NowMS + q.ResetAfterMS)
	d.numbers = true
}

// take calls one store and reports the call's duration to the observer:
// exactly one StoreDuration event per call, a failed or panicking one
// included. With no observer set it does not read the clock.
func (l *Limiter) take(ctx context.Context, s *storeRef, op *Op) (Result, error) {
	if !l.observing {
		return l.call(ctx, s, op)
	}
	start := time.Now()
	res, err := l.call(ctx, s, op)
	l.cfg.observer.StoreDuration(s.name, "take", time.Since(start))
	return res, err
}

// storeRef is a Store with its optional interfaces resolved once, at New,
// instead of by type assertions on every call.
type storeRef struct {
	Store
	inProcess bool
	name      string // the store label of metrics: StoreName(), or "custom"
}

func newStoreRef(s Store) storeRef {
	if s == nil {
		return storeRef{}
	}
	r := storeRef{Store: s, name: "custom"}
	_, r.inProcess = s.(InProcessStore)
	if n, ok := s.(NamedStore); ok {
		r.name = n.StoreName()
	}
	return r
}

// call runs Store.Take with a recovered panic (reported as ErrStorePanic)
// and, for stores that do I/O, under the store timeout.
func (l *Limiter) call(ctx context.Context, s *storeRef, op *Op) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrStorePanic, p)
		}
	}()
	if s.inProcess {
		return s.Take(ctx, op)
	}
	// The store call is detached from the caller's cancellation and bounded
	// by the store timeout alone: a client that cancels its request (closes
	// its side of the connection) must get the same decision as one that
	// does not. Were its cancellation to fail the store call, the failure
	// mode would decide instead, and FailOpen would admit every such client.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.storeTimeout)
	defer cancel()
	return s.Take(tctx, op)
}

// storeFailed counts a failed decision's store failure and passes it to
// OnStoreError.
func (l *Limiter) storeFailed(ctx context.Context, r *Request, bucket string, err error) {
	l.countStoreFailure(bucket, err)
	if l.policy.OnStoreError != nil {
		l.onStoreError(ctx, r, bucket, err)
	}
}

// countStoreFailure counts one failed store call and logs it at most once
// per 10 s.
func (l *Limiter) countStoreFailure(bucket string, err error) {
	l.cfg.observer.StoreError(bucket, l.policy.FailureMode)
	if l.cfg.gates.allowStore() {
		l.cfg.logger.Warn("quotagate: store call failed; applying the failure mode (further failures are not logged for 10s)",
			slog.String("bucket", bucket), slog.String("failure_mode", l.policy.FailureMode.String()), slog.String("error", sanitize(err.Error())))
	}
}

// issue reports a client-address or route issue: an event every time, a log
// line at most once per 10 minutes per kind.
func (l *Limiter) issue(bucket string, kind Issue) {
	l.cfg.observer.ClientAddressIssue(bucket, kind)
	if l.cfg.gates.allowIssue(kind) {
		l.cfg.logger.Warn("quotagate: "+string(kind)+" (this kind is logged at most once per 10 minutes)",
			slog.String("bucket", bucket), slog.String("issue", string(kind)))
	}
}

// HTTPKeyFunc adapts a key function over *http.Request to a KeyFunc for
// adapters whose native request is an *http.Request (chi, net/http). A blank
// result or an error falls through to the client address.
func HTTPKeyFunc(f func(r *http.Request) (string, error)) KeyFunc {
	return func(req Request) (string, error) {
		r, ok := req.Native.(*http.Request)
		if !ok {
			return "", nil
		}
		return f(r)
	}
}

// HTTPCostFunc adapts a pricing function over *http.Request to
// Policy.CostFunc (a result <= 0 means the policy's Cost).
func HTTPCostFunc(f func(r *http.Request) int64) func(Request) int64 {
	return func(req Request) int64 {
		r, ok := req.Native.(*http.Request)
		if !ok {
			return 0
		}
		return f(r)
	}
}
