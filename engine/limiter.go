package limit

import (
	"context"
	"fmt"
	"github.com/quotagate/quotagate/engine/limitstore"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// Limiter applies one Policy through one Store. It is safe for concurrent use
// and is meant to be created once and shared (by several mounts too: every
// mount of one Limiter draws on the same buckets).
//
// Each step of a decision is one small part, in the order Check runs them:
// SkipPaths and Skip (userfuncs.go), the bucket (bucket.go), the identity
// (identity.go), the cost (userfuncs.go), the store key and the Op (key.go,
// op.go), the store call with its failure mode (storecall.go), the report
// (report.go), the response (response.go) and its writing (write.go).
type Limiter struct {
	policy     Policy
	res        resolved
	cfg        *config          // the Options of New, shared with the Limiters from With
	shared     bucketRef        // the Shared-scope bucket: Name or signature
	plans      map[string]*plan // Policy.Plans by name (res.plans[1:]); nil without plans
	state      string           // the default plan's state signatures joined by '+' (claims.go)
	shadowLog  logGate          // Policy.Shadow's log line, at most once per 10 s
	routes     routeCache
	keys       keyer
	store      storeCall
	resp       responder
	plainV4    bool                // IPv4 peers key as their own text: /32, no hashing, no trusted header
	needsRoute bool                // something reads Request.Route (see HTTPHandler)
	needsPath  bool                // something reads Request.Path (SkipPaths, a policy function)
	skip       map[string]struct{} // Policy.SkipPaths; nil when empty
	scratch    sync.Pool
	maxWaitMS  int64        // Policy.MaxWait in ms; 0: no waiting
	maxWaiting int64        // Policy.MaxWaiting, defaulted
	waiting    atomic.Int64 // requests in decide that may wait (wait.go)
	blockLog   logGate      // the block-start log line, at most once per 10 s (block.go)
	leaseMS    int64        // how long a charge stays unsettled without its Finish (block.go); 0: none kept
	calendar   bool         // a quota counts calendar periods (calendar.go)
	conc       *slots       // a Concurrency policy's slots (concurrency.go); nil otherwise

	tickets atomic.Uint64     // waiting requests' order of arrival (wait.go)
	linesMu sync.Mutex        // guards lines
	lines   map[lineKey]*line // the waiting lines (wait.go); nil until one waits
}

// scratch is per-call working memory, pooled so that the allowed path does
// not allocate: the Op handed to the store lives here, with its key bytes.
// (The Op must be on the heap: the store is called through an interface.)
type scratch struct {
	op  limitstore.Op
	key []byte
	// res is the store's answer and resp Check's response: here rather
	// than on the stack (see Check).
	res  limitstore.Result
	resp response
}

// New returns a Limiter for policy p on store s. Zero Policy fields take
// their defaults (Limit 100, Window 60 s, SlidingWindow). Errors wrap
// ErrInvalidPolicy or ErrInvalidOption and name the field or option.
func New(s limitstore.Store, p Policy, opts ...Option) (*Limiter, error) {
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
	if d, ok := s.(describer); ok && d.Describe().Shared && !cfg.keyPrefixSet {
		// Every service on the store would build the same keys from the
		// same numbers: one allowance per client for all of them.
		return nil, fmt.Errorf("%w: the store is shared between processes and no key prefix is set, so every service on it "+
			"with the same numbers would draw on one allowance per client: pass limit.WithKeyPrefix(\"<service name>\"), "+
			"or limit.WithKeyPrefix(limit.DefaultKeyPrefix) to share the default namespace on purpose", ErrInvalidOption)
	}
	cfg.rep = newReporter(cfg)
	return newLimiter(s, p, cfg)
}

// With returns what New(s, p, opts...) returns, s and opts being this
// Limiter's store and options: p inherits no Policy field and passes every
// check New makes. It is the way to apply another policy (a per-route mount,
// a Consume call site with its own quota) under the same Options, sharing
// their Observer, logger and store protection. Under WithLocalStore, for
// instance, p must set FailureMode FailLocal as the first policy did.
func (l *Limiter) With(p Policy) (*Limiter, error) {
	return newLimiter(l.store.primary.Store, p, l.cfg)
}

// newLimiter makes every check of New that reads the policy, for New and
// With alike (New checks the options before).
func newLimiter(s limitstore.Store, p Policy, cfg *config) (*Limiter, error) {
	res, err := p.resolve()
	if err != nil {
		return nil, err
	}
	if err := checkBlockStore(s, &p); err != nil {
		return nil, err
	}
	if cfg.localStore != nil && p.FailureMode != FailLocal {
		// Without FailLocal the local store would be ignored: the policy
		// would fail open silently.
		return nil, fmt.Errorf("%w: WithLocalStore is used only by FailureMode FailLocal, and Policy.FailureMode is %s: "+
			"set FailureMode: limit.FailLocal, or drop WithLocalStore", ErrInvalidOption, failureModeName(p.FailureMode))
	}
	if p.FailureMode == FailLocal && cfg.localStore == nil {
		return nil, fmt.Errorf("%w: FailureMode FailLocal needs a per-process store: pass WithLocalStore", ErrInvalidPolicy)
	}
	if p.FailureMode == FailLocal && p.BlockFor > 0 {
		if err := checkBlockStore(cfg.localStore, &p); err != nil {
			return nil, fmt.Errorf("%w (WithLocalStore: FailLocal decides on it while the store is away)", err)
		}
	}
	l := &Limiter{policy: p, res: res, cfg: cfg, maxWaitMS: p.MaxWait.Milliseconds(), maxWaiting: int64(p.MaxWaiting),
		leaseMS: p.pendingLeaseMS()}
	if l.maxWaitMS > 0 && l.maxWaiting == 0 {
		l.maxWaiting = defaultMaxWaiting
	}
	name := res.signature
	if p.Name != "" {
		name = p.Name
	}
	l.shared = newBucketRef(name)
	l.keys = keyer{prefix: cfg.keyPrefix, hashKeys: cfg.hashKeys, phased: !p.AlignWindows && p.Algorithm != TokenBucket}
	for i := range l.res.plans {
		pl := &l.res.plans[i]
		set, fb := &pl.sets[0], &pl.sets[1]
		// The fallback bucket (requests with no identity) is tightened, but
		// never below the policy's Cost: a capacity under it would limit
		// every request without a client address for ever. A TokenBucket
		// keeps its rate and divides Burst.
		*fb = *set
		for j := range set.n {
			q := &fb.q[j]
			if p.Algorithm == TokenBucket {
				q.burst = max(res.cost, q.burst/cfg.fallbackDivisor)
			} else {
				q.limit = max(res.cost, q.limit/cfg.fallbackDivisor)
			}
			set.q[j].state = planState(pl.name, set.q[j].stateSignature(&p))
			q.state = planState(pl.name, q.stateSignature(&p))
		}
		set.hdr = newSetHeaders(&p, set, set)
		fb.hdr = newSetHeaders(&p, set, fb)
		if pl.name != "" {
			if l.plans == nil {
				l.plans = make(map[string]*plan, len(l.res.plans)-1)
			}
			l.plans[pl.name] = pl
		}
	}
	def := &l.res.plans[0].sets[0]
	states := make([]string, def.n)
	for i := range def.n {
		states[i] = def.q[i].state
	}
	l.state = strings.Join(states, "+")
	l.calendar = l.res.hasCalendar()
	l.store = newStoreCall(s, cfg, p.FailureMode)
	if p.Algorithm == Concurrency {
		if err := l.initSlots(s, cfg); err != nil {
			return nil, err
		}
	}
	l.resp = newResponder(&p)
	l.plainV4 = cfg.ipv4Bits == 32 && !cfg.hashKeys && cfg.trust.mode == trustNone
	funcs := p.KeyFunc != nil || p.CostFunc != nil || p.Plan != nil || p.Skip != nil ||
		p.OnLimited != nil || p.OnStoreError != nil || p.LimitedResponse != nil // they receive the Request
	l.needsRoute = (p.Scope == PerRoute && p.Name == "") || cfg.rep.observing || p.Shadow || funcs // Shadow: the handler of its log line
	l.needsPath = len(p.SkipPaths) > 0 || funcs
	if len(p.SkipPaths) > 0 {
		l.skip = make(map[string]struct{}, len(p.SkipPaths))
		for _, path := range p.SkipPaths {
			l.skip[path] = struct{}{}
		}
	}
	l.scratch.New = func() any { return &scratch{key: make([]byte, 0, 256)} } // room for the keys of several quotas
	if err := l.claim(s); err != nil {
		return nil, err
	}
	return l, nil
}

// Check decides one HTTP request for an adapter: it writes the engine's
// header fields into w (none at the default disclosure on an allowed
// request; several mounts on one request merge) and, when the request is
// limited, the whole response (w.Send: 429 Too Many Requests per RFC 6585
// with Retry-After and an RFC 9457 problem body by default, 503 under
// FailClosed, or Policy.LimitedResponse's). The adapter calls its next
// handler when the returned Decision is Allowed and stops its chain
// otherwise; that and translating its framework's request into r is all an
// adapter does. Frameworks built on net/http use CheckHTTP instead.
//
// In order: CORS preflights (unless Policy.LimitPreflights), SkipPaths and
// Skip (a skipped request returns at once, Allowed with Outcome "", nothing
// counted, reported or written); bucket, identity
// and cost; the store call (under the store's own timeout: guard); on a store failure the
// FailureMode, the count, the rate-limited log line and OnStoreError; the
// Decision event; the response; when limited, OnLimited and then
// LimitedResponse. Policy functions run synchronously on the calling
// goroutine.
//
// It never panics on request input or in user-supplied functions, and never
// blocks longer than the store call (a guarded store such as the Redis
// store answers within its timeout) plus the time user functions take,
// and, with Policy.MaxWait, the wait for a reserved slot (at most MaxWait,
// never past ctx's deadline; see Policy.MaxWait).
// At the default disclosure an allowed request allocates nothing.
func (l *Limiter) Check(ctx context.Context, r Request, w ResponseWriter) Decision {
	// The response (816 bytes) and the store's Result live in a pooled
	// scratch, not on the stack: a gRPC server starts every call on a
	// fresh goroutine, whose stack would otherwise grow (be copied) under
	// the store call. resp is cleared when put back, so that it holds
	// nothing of this request (w, among others) while pooled.
	sc := l.scratch.Get().(*scratch)
	resp := &sc.resp
	defer l.putScratch(sc)
	l.check(ctx, &r, resp, sc)
	if resp.n != 0 || resp.status != 0 {
		resp.writeTo(w)
	}
	if m, ok := w.(limitMark); ok {
		settle(&resp.Decision, m)
	}
	return resp.Decision
}

// putScratch clears the response of sc (Check's) and pools sc.
func (l *Limiter) putScratch(sc *scratch) {
	sc.resp = response{}
	l.scratch.Put(sc)
}

// check is the decision of one HTTP request, straight through; it fills
// resp, the zero response, in place (no copy of the response). sc is
// the caller's scratch for decide, or nil.
func (l *Limiter) check(ctx context.Context, r *Request, resp *response, sc *scratch) {
	if l.skipped(r) {
		resp.Decision = Decision{Allowed: true, Policy: &l.policy}
		return
	}
	r.lim = l
	if r.Unmatched {
		r.Route = "" // no route serves it: no PerRoute bucket, no handler label
	}
	bucket := l.bucket(r)
	id := l.identify(r, bucket.name)
	cost := l.cost(r)
	pl := l.plan(r, bucket.name)
	var err error
	resp.set, err = l.decide(ctx, &bucket, &id, pl, cost, &resp.Decision, sc)
	if err != nil && l.policy.OnStoreError != nil {
		l.onStoreError(ctx, r, bucket.name, err)
	}
	if !resp.Decision.Allowed && l.policy.Shadow {
		l.shadow(&resp.Decision, r.Route)
	}
	l.cfg.rep.decision(bucket.name, r.Route, id.src, &resp.Decision)
	l.resp.fill(resp)
	if resp.Decision.Allowed {
		return
	}
	if l.policy.OnLimited != nil {
		l.onLimited(ctx, r, &resp.Decision)
	}
	if l.policy.LimitedResponse != nil {
		l.limitedResponse(ctx, r, resp)
	}
}

// decide builds the Op of (bucket, id) at cost with the quotas of plan pl,
// asks the store and writes the Decision into d, applying the FailureMode
// on a store failure, whose error it returns with the quotaSet that decided.
// It builds the Op in sc, the caller's scratch, or in one of its own when sc
// is nil. d must be the zero Decision (every caller's is fresh or cleared:
// checkHTTP's response, Check's pooled one, ConsumeN's), so that it is
// filled field by field without being cleared a second time.
func (l *Limiter) decide(ctx context.Context, bucket *bucketRef, id *who, pl *plan, cost int64, d *Decision, sc *scratch) (*quotaSet, error) {
	if l.conc != nil {
		return l.decideSlot(ctx, bucket, id, pl, cost, d)
	}
	set := &pl.sets[0]
	if id.src == KeySourceFallback {
		set = &pl.sets[1]
	}
	own := sc == nil
	if own {
		sc = l.scratch.Get().(*scratch)
	}
	op, over, quota := l.op(sc, bucket, id, set, cost)
	d.Cost, d.Bucket, d.KeySource, d.Policy, d.Plan, d.quota, d.who = cost, bucket.name, id.src, &l.policy, pl.label, quota, *id
	var err error
	var wait arrival
	if over {
		// Never admissible: answered here, without the store (nothing
		// to count, and no delay to promise).
		d.Outcome, d.OverCapacity = OutcomeLimited, true
	} else {
		if l.maxWaitMS > 0 {
			wait = l.enterWait(ctx, op)
		}
		err = l.store.decide(ctx, op, bucket.name, d, &sc.res)
		l.logBlock(d)
		if d.Allowed && (err == nil || d.charge.local) {
			// Taken from the shared store, or FailLocal's local one:
			// Finish may give it back there.
			d.charge.lim, d.charge.bucket, d.charge.id, d.charge.set, d.charge.cost = l, *bucket, *id, set, cost
		}
	}
	d.Limit = set.q[d.quota].limit
	if l.maxWaitMS > 0 && d.Allowed && d.waitMS == 0 && d.charge.lim != nil && pastDeadline(ctx) {
		l.giveUpLate(ctx, d)
	}
	var line lineKey
	if wait.ticket != 0 && d.waitMS > 0 && d.Allowed {
		line = lineKey{keys: string(sc.key), local: d.charge.local, cost: cost}
	}
	if own {
		l.scratch.Put(sc)
	}
	if wait.ticket != 0 {
		if d.waitMS > 0 && d.Allowed {
			l.await(ctx, d, wait, line)
		}
		l.waiting.Add(-1)
	}
	return set, err
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
// want to log it (it never means "limited"). A ctx cancelled, or past its
// deadline, before or while the store is asked, when the store returns at
// that (a guarded store does: see package guard) or fails with
// context.Canceled or context.DeadlineExceeded, gives a Decision that
// admits nothing, whatever the FailureMode, with that error (the caller is
// gone, or asked for an answer sooner than the store gives one; what the
// call did in the store stays done). Events are emitted as for Check,
// with an empty handler. For a Concurrency policy an allowed Decision holds
// its slots, renewing their lease, until Finish gives them back: call
// Finish once the work is done (a Decision never finished holds its slots
// while the process lives). OnStoreError and OnLimited are called as for Check,
// with a Request whose Native is identity (a string) and whose other fields
// are empty; SkipPaths, Skip and LimitedResponse do not apply.
func (l *Limiter) ConsumeN(ctx context.Context, identity string, n int64) (Decision, error) {
	id := who{src: KeySourceConsume, text: identity}
	if strings.TrimSpace(identity) == "" {
		id = fallbackWho
		l.cfg.rep.issue(l.shared.name, issueNoClientAddress)
	}
	cost := l.res.cost
	if n > 0 {
		cost = n
	}
	var d Decision
	var r Request
	pl := &l.res.plans[0]
	if l.policy.Plan != nil {
		r = Request{Native: identity, lim: l}
		pl = l.plan(&r, l.shared.name)
	}
	_, err := l.decide(ctx, &l.shared, &id, pl, cost, &d, nil)
	if (err != nil && l.policy.OnStoreError != nil) || (!d.Allowed && l.policy.OnLimited != nil) {
		r = Request{Native: identity, lim: l}
	}
	if err != nil && l.policy.OnStoreError != nil {
		l.onStoreError(ctx, &r, l.shared.name, err)
	}
	if !d.Allowed && l.policy.Shadow {
		l.shadow(&d, "")
	}
	l.cfg.rep.decision(l.shared.name, "", id.src, &d)
	if !d.Allowed && l.policy.OnLimited != nil {
		l.onLimited(ctx, &r, &d)
	}
	return d, err
}

// planState is the state signature of a plan's quota: the quota's own
// (stateSignature) for the default plan, "<plan>=<signature>" for a named
// plan, so that each plan has its own records.
func planState(plan, state string) string {
	if plan == "" {
		return state
	}
	return plan + "=" + state
}

// shadow turns the limited Decision of a Policy.Shadow policy into an
// admitted one with Outcome OutcomeShadowLimited, and logs it at most once
// per 10 s per Limiter.
func (l *Limiter) shadow(d *Decision, handler string) {
	d.Allowed, d.Outcome = true, OutcomeShadowLimited
	if l.shadowLog.allow(l.cfg.rep.clock(), storeLogEvery) {
		l.cfg.rep.logger.Info("quotagate: shadow policy would have limited a request; admitted (logged at most once per 10s per limiter; every one is counted with outcome shadow-limited)",
			slog.String("bucket", d.Bucket), slog.String("handler", handler), slog.String("plan", d.Plan),
			slog.Bool("over_capacity", d.OverCapacity), slog.Bool("store_failed", d.StoreFailed),
			slog.Duration("retry_after", d.RetryAfter))
	}
}
