package limit

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// Defaults applied to zero-valued Policy fields, and the longest Window.
const (
	defaultLimit  = 100
	defaultWindow = 60 * time.Second
	defaultCost   = 1
	maxWindow     = 366 * 24 * time.Hour
	// maxRefill is the longest accepted TokenBucket refill time, the time
	// an empty bucket takes to fill: Burst * Window / Limit. It keeps every
	// delay, header value and time to live a TokenBucket produces in range.
	maxRefill = 366 * 24 * time.Hour
)

// maxHeaderInt is the largest integer a Structured Field carries (RFC 9651
// Integer: at most 15 digits); Limit and Burst above it are rejected, so
// every count a header field reports fits.
const maxHeaderInt = 999_999_999_999_999

// maxExact is 2^53: every integer below it is exact in a float64, which is
// what a Redis Lua script computes with. Policies whose arithmetic could reach
// it are rejected by New so that the Go and Lua implementations agree.
const maxExact = 1 << 53

// maxTokenBucketUnits bounds Burst*Window (ms) and Limit of a TokenBucket
// (2^50). GCRA works in units of 1/Limit ms, where the bucket's tolerance is
// Burst*Window; its largest intermediate, (2*Burst+2)*Window + 2*Limit,
// then stays below 2^52 (see Quota.gcra).
const maxTokenBucketUnits = 1 << 50

// checkTokenBucket validates a TokenBucket's numbers: any Limit per Window
// is exact, within the bounds of maxTokenBucketUnits and maxRefill. Errors
// name the field to change.
func checkTokenBucket(limit, windowMS, burst int64) error {
	if limit > maxTokenBucketUnits {
		return fmt.Errorf("%w: TokenBucket Limit %d exceeds 2^50, the bound of exact arithmetic; lower Limit (or Window with it)", ErrInvalidPolicy, limit)
	}
	if burst > maxTokenBucketUnits/windowMS {
		return fmt.Errorf("%w: TokenBucket Burst %d times Window %d ms exceeds 2^50, the bound of exact arithmetic; lower Burst", ErrInvalidPolicy, burst, windowMS)
	}
	// Burst*windowMS < 2^50 here: the refill time in whole ms, rounded up.
	if refill := ceilDiv(burst*windowMS, limit); refill > maxRefill.Milliseconds() {
		return fmt.Errorf("%w: TokenBucket Burst %d at Limit %d per %d ms takes %v to refill, over the maximum %v; lower Burst or raise Limit",
			ErrInvalidPolicy, burst, limit, windowMS, msText(refill), maxRefill)
	}
	return nil
}

// msText writes ms milliseconds as a Duration does, or in hours and years
// past a Duration's range (about 292 years).
func msText(ms int64) string {
	if ms <= int64(math.MaxInt64/time.Millisecond) {
		return (time.Duration(ms) * time.Millisecond).String()
	}
	return fmt.Sprintf("%dh (about %d years)", ms/3_600_000, ms/31_556_952_000)
}

// Algorithm selects the rate-limiting algorithm of a [Policy]: one of
// [SlidingWindow] (the zero value), [FixedWindow] and [TokenBucket]. It is
// the store contract's own type (limitstore.Algorithm), so a Policy's
// algorithm is the one its store keys and Ops carry.
type Algorithm = limitstore.Algorithm

// The algorithms (see limitstore for their math).
const (
	// SlidingWindow (the default) weighs the previous fixed window by the part
	// of it still inside the sliding window: estimate = prev*(W-elapsed)/W + curr.
	SlidingWindow = limitstore.SlidingWindow
	// FixedWindow counts requests in windows of length Window, each identity
	// with its own phase offset (see Policy.AlignWindows).
	FixedWindow = limitstore.FixedWindow
	// TokenBucket refills Limit tokens per Window up to Burst, implemented as
	// GCRA (generic cell rate algorithm) with a theoretical arrival time (TAT).
	TokenBucket = limitstore.TokenBucket
)

// letter is the one-letter code of a used in bucket signatures and store
// keys: s (sliding window), f (fixed window), g (token bucket, GCRA).
func letter(a Algorithm) byte {
	switch a {
	case FixedWindow:
		return 'f'
	case TokenBucket:
		return 'g'
	case Concurrency:
		return 'c'
	}
	return 's'
}

// Scope decides which requests passing through one mount share an allowance.
// The zero value is [Shared].
type Scope uint8

const (
	// Shared (the default): one allowance per identity for every request that
	// passes through the mount.
	Shared Scope = iota
	// PerRoute: one allowance per identity and matched route template
	// ("/v1/notes/{id}"); the raw path and the method never select a bucket.
	PerRoute
)

// FailureMode says what happens to a request when the store fails or times out.
// The zero value is [FailOpen].
type FailureMode uint8

const (
	// FailOpen (the default) admits the request; the Decision's Outcome is
	// OutcomeDegraded and no RateLimit numbers are claimed.
	FailOpen FailureMode = iota
	// FailLocal applies the same policy in a per-process store (see
	// WithLocalStore) while the shared store is failing.
	FailLocal
	// FailClosed rejects the request with 503 Service Unavailable and
	// Retry-After.
	FailClosed
)

// String returns "open", "local" or "closed".
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailLocal:
		return "local"
	case FailClosed:
		return "closed"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Policy describes one rate limit. It is a plain struct; zero fields take the
// documented defaults, and [New] validates it, returning an error that names
// the offending field. A Policy must not be modified after New.
type Policy struct {
	// The quota: how much, per how long, counted how.

	// Limit is the quota per Window (requests, or cost units). 0 means the
	// default, 100, never unlimited; negative is an error, and so is more
	// than 15 digits (header fields carry it as an RFC 9651 Integer) or a
	// product 4*Limit*Window (ms) of 2^53 or more (SlidingWindow and
	// FixedWindow: exact arithmetic in Lua doubles).
	Limit int64
	// Window is the period of the quota, a whole number of milliseconds from
	// 1 ms to 366 days (a rolling window; for calendar days, weeks, months
	// and years see Per). 0 means the default, 60 s. With a long Window the
	// bound on 4*Limit*Window lowers the largest Limit: 71 000 per 366
	// days.
	Window time.Duration
	// Algorithm is SlidingWindow (default), FixedWindow, TokenBucket, or
	// Concurrency (slots in flight, not a rate; see Lease).
	Algorithm Algorithm
	// Burst is the TokenBucket capacity (default Limit); other algorithms
	// reject a non-zero Burst. At most 15 digits. A TokenBucket accepts any
	// Limit per Window (3 per second, 7 per minute: exact, no rounding of
	// the emission interval) as long as Burst*Window (ms) and Limit stay
	// within 2^50 and the refill time Burst*Window/Limit within 366 days,
	// so that every delay, header value and store TTL stays in range.
	Burst int64
	// MaxWait, when set (TokenBucket only), lets a request wait for a slot
	// instead of being limited: a request the bucket cannot take now
	// reserves the next slot in the store, atomically (the TAT moves forward
	// by its cost), when that slot begins within MaxWait and before the
	// request's context deadline, and the engine waits for it on the
	// request's own goroutine (one timer) before answering: Check and
	// CheckHTTP return, and the adapters run the handler, when the slot
	// begins; Consume and ConsumeN return then. Decision.Waited says how
	// long. Otherwise the request is limited as without MaxWait and
	// nothing is reserved. A request whose context ends while it waits
	// is limited, returning after one store call at most, and its
	// Limiter gives a slot back (exactly its cost): the line's latest,
	// one Refund at a time, the later ones while its other requests
	// wait. A slot the store cannot take back (something was reserved
	// after it: another process, another cost, a request of this
	// Limiter on its way) stays reserved, and the Limiter's next request
	// of that cost takes it instead of its own later slot; one nobody
	// takes before it begins passes unused rather than being given out
	// twice. A request whose slot begins after its context's deadline
	// (its store call came back that late, a slot at once included)
	// gives up so, at once, and gives its slot back. A context
	// that reaches its deadline once the slot has begun ends no wait: the
	// request is admitted, however late its goroutine hears of either. Waiting
	// requests are served one emission interval (Window/Limit) per cost
	// unit apart, across every process on the store, in the order they
	// reserved, and within this Limiter in the order they arrived (never past a request's own MaxWait or deadline);
	// a request that gives up leaves no gap: the ones of this Limiter
	// after it move one slot earlier. At most MaxWaiting requests of this
	// Limiter wait at once in a process. A whole number of milliseconds, at
	// most 1 h; with Limit per Window, MaxWait (ms) times Limit stays
	// within 2^50. New rejects it on SlidingWindow and FixedWindow (use
	// TokenBucket), negative, and together with Shadow. It is part of the
	// state signature: a policy with another MaxWait keeps other records.
	// 0: no waiting.
	MaxWait time.Duration
	// MaxWaiting bounds the requests of this Limiter waiting for a slot at
	// once in this process (MaxWait); past it a request that would wait is
	// decided as without MaxWait (admitted if the bucket takes it now,
	// else limited at once). A request counts from its store call, which
	// may reserve a slot, to the end of its wait (or of the call, when it
	// reserved none), so that no more than MaxWaiting reservations are ever
	// held: a request that arrives while MaxWaiting others are asking the
	// store is decided as without MaxWait even if none of them will wait.
	// Default 1024; negative is an error, and so is MaxWaiting without
	// MaxWait.
	MaxWaiting int
	// Quotas, when set, are the policy's quotas in place of Limit, Window
	// and Burst (which must then be zero): at most MaxQuotas (4), all with
	// the policy's Algorithm, applied all or nothing. A request is admitted
	// only when every quota admits its cost, and then takes it from each; a
	// limited request takes nothing from any. Retry-After is the latest of
	// the limiting quotas'; RateLimit-Policy lists every quota and RateLimit
	// reports the one closest to exhaustion (fewest Remaining). All quotas of
	// one identity live in one Redis Cluster slot: one store round trip.
	// Each quota counts its own window (or calendar unit and zone): two
	// with one Window would share a record, and New refuses them.
	// Example, 2 per 10 s and 5 per minute:
	//	Quotas: []limit.Rate{{Limit: 2, Window: 10 * time.Second}, {Limit: 5, Window: time.Minute}}
	Quotas []Rate
	// AlignWindows sets the FixedWindow/SlidingWindow phase to 0 for every
	// identity (windows start on multiples of Window since the Unix epoch).
	// By default each identity has its own phase, hash(identity) mod Window,
	// so that clients do not all regain their quota at the same instant.
	AlignWindows bool

	// What a request costs, and which responses count.

	// Cost is what one request takes from the quota (default 1, at most the
	// capacity: Limit, or Burst for TokenBucket). CostFunc overrides it.
	Cost int64
	// CostFunc, when set, prices each request (e.g. 3 for an expensive
	// query). A result <= 0 means Cost; a panic is recovered, means Cost and
	// is reported as Issue "hook-panic".
	// A cost above the capacity is denied without consuming anything.
	CostFunc func(r Request) int64
	// CountStatus, when set, makes the policy count only the requests whose
	// response status it names: true counts the request, false gives its
	// cost back once the handler has answered (e.g. func(s int) bool
	// { return s >= 400 } limits failed logins and lets successful ones
	// through free; s < 400 counts only successes). The cost is taken
	// before the handler, as for any request, and refunded after it when
	// the status does not count, so concurrent requests never take more
	// than the quota: a request waiting for its handler holds its charge.
	// The adapter reports the status through Limiter.Finish (every adapter
	// of this project does; the engine's own HTTPHandler cannot see the
	// status and counts every request). A request whose status is unknown
	// (a handler that panicked, a Finish that never came, a store that
	// failed the refund) stays counted: the safe direction. With BlockFor,
	// Finish makes one store call for every admitted request, counted or
	// not (see BlockFor and Lease). A panic is
	// recovered, counts the request and is reported as Issue "hook-panic". It
	// runs synchronously and must be safe for concurrent use. nil: every
	// request counts.
	CountStatus func(status int) bool

	// Plans: other quotas chosen per request.

	// Plans gives named plans their own quotas (each 1 to MaxQuotas Rates;
	// keys are printable ASCII without ':'); Plan chooses a request's
	// plan. The Policy's own quotas (Limit/Window/Burst, or Quotas) are the
	// default plan. Each plan has its own records, and the RateLimit fields
	// show the plan's numbers. The bucket (and its metrics label) stays the
	// policy's; the plan is DecisionEvent.Plan (the metrics' plan label).
	Plans map[string][]Rate
	// Plan names the plan of a request (an API key's tier, say); required
	// with Plans. "" and DefaultPlan mean the default plan. An error, a
	// panic or any other name not in Plans also means the default plan,
	// reported as Issue "plan-fallback". It runs after KeyFunc and CostFunc,
	// synchronously, and must be safe for concurrent use; returning a
	// constant string allocates nothing. For Consume, r is empty but for
	// Native, which holds the identity (a string). The adapters' PlanFunc
	// helpers (limit.PlanFuncOf) take the framework's own request.
	Plan func(r Request) (string, error)
	// DefaultPlan names the default plan (the Policy's own quotas), "free"
	// say: Plan may return it, and Decision.Plan and the plan label of the
	// metrics show it. Printable ASCII without ':', not a key of Plans.
	// Default "": the default plan has no name. Naming it moves no record:
	// the default plan's keys carry no plan name either way.
	DefaultPlan string

	// Whose allowance: the bucket and the identity.

	// Name, when set, is the bucket: every mount with the same Name shares one
	// allowance per identity. It is also the policy name in RateLimit headers.
	// Printable ASCII, no ':', not blank. Default: the signature, e.g. "100p60".
	// Records are kept per Name, quota window (or calendar unit and
	// zone) and algorithm, not per Limit or Burst: a policy whose Limit
	// or Burst changes under one Name (a new deploy, a rolling one) keeps
	// what each identity used; one whose Window, Per, Location,
	// Algorithm, AlignWindows or MaxWait changes starts afresh.
	Name string
	// Scope is Shared (default) or PerRoute; ignored when Name is set.
	Scope Scope
	// KeyFunc, when set, derives the identity first: the identity a
	// request draws on (an API key, a user ID). A blank result or an error
	// falls through to the next source of identity (trusted header, socket
	// peer); a panic is recovered and counted, never turned into a 500. It
	// must be safe for concurrent use. Adapters offer typed helpers over
	// their own request type (KeyFuncOf).
	KeyFunc func(r Request) (string, error)

	// When the store fails.

	// FailureMode applies when the store fails: FailOpen (default), FailLocal
	// or FailClosed.
	FailureMode FailureMode

	// What clients are told.

	// Disclosure is what clients are told: DiscloseRetryAfter (default),
	// DiscloseNone, DiscloseOnLimit or DiscloseAlways.
	Disclosure Disclosure
	// HeaderStyle selects the RateLimit header fields (HeadersIETF by
	// default; combine with |).
	HeaderStyle HeaderStyle
	// ProblemType is the "type" member of the default 429 body (RFC 9457
	// problem details), a URI reference (RFC 3986) such as
	// "https://iana.org/assignments/http-problem-types#quota-exceeded", the
	// type draft-ietf-httpapi-ratelimit-headers asks IANA to register for an
	// exceeded quota (pending when this was written). Default "about:blank"
	// (RFC 9457: the problem is described by the status code alone).
	// New rejects a value that is not a URI reference: whitespace, control
	// bytes, non-ASCII, '"', '\', '<', '>' or a malformed %-escape. The 503
	// body of FailClosed always says "about:blank": it is not a quota problem.
	ProblemType string
	// LimitedResponse, when set, builds the response to a limited request
	// in place of the default problem body (see the LimitedResponse type for
	// what it may replace). A nil result, a panic or a Status outside 400-599 falls back
	// to the default response, reported as Issue "limited-response-fallback" and
	// logged at most once per 10 minutes. It runs synchronously and must be
	// safe for concurrent use. Consume never calls it.
	LimitedResponse func(ctx context.Context, r Request, d Decision) *LimitedResponse

	// Which requests are limited.

	// SkipPaths lists request paths that bypass this limiter, compared with
	// Request.Path byte for byte (no prefix, pattern or regular-expression
	// form; "/health" does not match "/health/"). Each must start with '/'.
	// A skipped request is not counted, emits no event, calls no hook and
	// gets no header: Check returns an Allowed Decision with Outcome "".
	SkipPaths []string
	// LimitPreflights makes CORS preflight requests (OPTIONS carrying
	// Access-Control-Request-Method) count and be limited like any other
	// request. By default they pass untouched, as a skipped request does
	// (not counted, no event, no header): a browser sends one before a
	// cross-origin request, which is counted itself, and a limited
	// preflight surfaces as an opaque CORS failure rather than a 429. A
	// preflight reaches the next handler unlimited, so set LimitPreflights
	// when a handler does real work for OPTIONS.
	LimitPreflights bool
	// Skip, when set, is asked about every request not in SkipPaths; true
	// skips it (as SkipPaths). It runs synchronously on the request path and
	// must be safe for concurrent use. A panic counts as false (the request
	// is limited as usual: a broken predicate never opens the limiter) and is
	// reported as Issue "hook-panic".
	Skip func(r Request) bool
	// Shadow runs the policy without enforcing it: requests are decided and
	// counted as usual, but a request the policy would limit is admitted
	// with Outcome OutcomeShadowLimited (its own label value in
	// quotagate_requests_total) and logged at most once per 10 s per
	// Limiter. A shadow policy writes no header field, never calls
	// OnLimited or LimitedResponse, and never answers 429 or 503. Mount it
	// next to an enforcing one to try a new limit on live traffic.
	Shadow bool

	// Hooks.

	// OnLimited, when set, is called synchronously for every limited request
	// (429, and 503 under FailClosed), after the Decision and before
	// LimitedResponse. A panic is recovered, reported as Issue "hook-panic" and
	// logged at most once per 10 minutes; the request still gets its limited
	// response, never a 500. For Consume and ConsumeN, r is empty except
	// Native, which holds the identity (a string); d.Cost is the cost.
	OnLimited func(ctx context.Context, r Request, d Decision)
	// OnStoreError, when set, is called synchronously once for every
	// decision whose store call failed (error, timeout or panic; when
	// FailLocal's local store failed too, err joins both errors), before the
	// FailureMode's response is built. Panics are handled as for
	// OnLimited. err may describe the backend: never show it to clients. For
	// Consume and ConsumeN, r is as for OnLimited.
	OnStoreError func(ctx context.Context, r Request, err error)

	// Blocks: a limited identity stays limited.

	// BlockFor, when set, blocks an identity the policy limits: from the
	// moment a request is limited by its quotas, every request of that
	// identity is limited for BlockFor, whatever the quotas say, answered
	// 429 with Retry-After the time left on the block (rounded up, never
	// early), charged nothing and counted as limited (Decision.Blocked;
	// DecisionEvent.Blocked). Requests during a block do not extend it.
	// The store decides it in the same atomic step as the quotas, from a
	// record under the identity's hash tag, so every process on a shared
	// store honours it from its next request, and a guarded store's deny
	// cache answers the blocked identity without a store call after the
	// first denial. With CountStatus a block follows the counted requests
	// only (the request that finds the counted quota spent begins it):
	// the store keeps the identity's charges still waiting for their
	// status (a record beside the block's), Finish settles each, and a
	// request limited while one is unsettled begins no block, since its
	// quota may be spent by requests that will be given back; successes
	// never block, concurrent ones included. A charge whose Finish never
	// comes counts as settled after Lease to twice that.
	// Shadow decides and reports blocks and enforces none. Limiter.Reset
	// lifts a block; Limiter.Peek shows it. Requests without an identity
	// (the fallback bucket) are never blocked. A whole number of
	// milliseconds, at most 180 days; negative is an error, and so is a
	// store that does not decide blocks (limitstore.Info.Blocks). 0: no
	// blocks.
	BlockFor time.Duration
	// BlockMax, when set, lengthens repeat offences: a block that begins
	// while the identity's previous offence is remembered lasts twice the
	// previous block, up to BlockMax. An offence is remembered from the
	// start of its block until BlockMax after the block ends; after that
	// the next block lasts BlockFor again. At least BlockFor, at most 180
	// days, a whole number of milliseconds; it needs BlockFor. 0: every
	// block lasts BlockFor.
	BlockMax time.Duration
	// Calendar quotas.

	// Per, when set, makes the policy's own quota a calendar quota: Limit
	// per calendar Day, Week (ISO, Monday first), Month or Year in
	// Location, in place of Window (which must then be 0). The window
	// begins at the local boundary (midnight; Monday's; the first of the
	// month; the first of January) and lasts until the next, 23 to 25
	// hours for a day across a daylight-saving change, 28 to 31 days for a
	// month. Only FixedWindow counts calendar periods (New rejects the
	// other algorithms). Reset, Retry-After and the RateLimit fields'
	// reset are the time to the next local boundary; RateLimit-Policy's w
	// is the length of the current period in seconds. A store key lives
	// until the boundary plus 1 s. The engine finds the period from its
	// own clock (WithClock) and tells the store its start and length, so
	// the stores know nothing of zones. 0: Window applies.
	Per Period
	// Location is the time zone of Per's calendar (default time.UTC):
	// the application's, e.g. time.LoadLocation("America/New_York"),
	// which reads the system's zoneinfo, or the copy embedded by
	// importing time/tzdata. New rejects a Location without Per and one
	// without a name.
	Location *time.Location
	// Lease is, for a Concurrency policy, how long a slot stays taken when
	// its holder vanishes (a killed process, a lost connection to the
	// store): a request holds its slot while its handler runs, however
	// long, renewing the lease every Lease/3 (one store call each), and a
	// killed process's slots are free again within Lease of its last
	// renewal. A whole number of milliseconds from 100 ms to 24 h; 0 means
	// DefaultLease (10 s: a renewal every 3.3 s per long request, and a
	// crash locks a client out of the slots it held for at most 10 s).
	//
	// For a policy with both CountStatus and BlockFor it is how long an
	// admitted request's charge stays unsettled in the store without its
	// Finish (a killed process, a handler running longer, a failed
	// store call), holding off a block meanwhile (see BlockFor): at least
	// Lease and less than twice Lease (lease periods of Lease from the
	// Unix epoch: a charge counts until the period after its own ends),
	// not renewed. With MaxWait a charge counts from its reservation, and
	// its request goes on at its slot, up to MaxWait later: Lease is to
	// cover MaxWait and the handler. A whole number of milliseconds, at
	// most 24 h; 0 means DefaultLease. Other policies ignore it.
	Lease time.Duration
}

// Rate is one quota of a policy with several (Policy.Quotas) or of a plan
// (Policy.Plans): Limit per Window, and for a TokenBucket its capacity
// Burst. Every quota of a policy uses the policy's Algorithm. Limit is
// required, and Window or, for a calendar quota, Per (no defaults); the
// bounds are the Policy's own (Limit, Window, Burst).
type Rate struct {
	// Limit is the quota per Window, >= 1, at most 15 digits.
	Limit int64
	// Window is the quota's period, a whole number of milliseconds from
	// 1 ms to 366 days.
	Window time.Duration
	// Burst is the TokenBucket capacity (0: Limit); other algorithms
	// reject a non-zero Burst.
	Burst int64
	// Per, when set, makes this a calendar quota: Limit per calendar Day,
	// Week, Month or Year in Location, in place of Window (see
	// Policy.Per). 10 per second and 10 000 per month:
	//	Quotas: []limit.Rate{{Limit: 10, Window: time.Second}, {Limit: 10000, Per: limit.Month}}
	Per Period
	// Location is Per's time zone (default time.UTC; see Policy.Location).
	Location *time.Location
}

// quotaSpec is one validated quota: its numbers, the state signature its
// store key carries (key.go) and its name in RateLimit header fields.
type quotaSpec struct {
	limit, windowMS, burst int64
	state                  string
	cal                    *calendar // a calendar quota's unit and zone; nil: Window
}

// capacity is the most one request can take: Limit, or Burst for a
// TokenBucket.
func (q *quotaSpec) capacity(a Algorithm) int64 {
	if a == TokenBucket {
		return q.burst
	}
	return q.limit
}

// quotaSet is the quotas one decision applies, all or nothing: a plan's,
// or its fallback bucket's tightened copy; hdr holds their rendered header
// parts (response.go).
type quotaSet struct {
	n   int
	q   [limitstore.MaxQuotas]quotaSpec
	hdr setHeaders
}

// plan is one plan's quotas: the Policy's own (the default plan, name "")
// or one of Policy.Plans. sets[0] is for identified requests, sets[1] for
// the fallback bucket (requests with no identity).
type plan struct {
	name  string // the plan's name in its keys: "" for the default plan
	label string // Decision.Plan: name, or Policy.DefaultPlan for the default plan
	sets  [2]quotaSet
}

// resolved holds a validated policy's derived values.
type resolved struct {
	cost int64
	// signature is the default plan's quotas' signatures joined by '+'
	// ("100p60", "2p10+5p60"): the default bucket name.
	signature string
	// plans[0] is the default plan, then Policy.Plans in name order.
	plans []plan
}

// checkRate validates one quota's numbers for algorithm a; field is ""
// for the Policy's own Limit, Window and Burst (defaults applied), or the
// quota's place ("Quotas[1].", `Plans["pro"][0].`), prefixed to every field
// an error names.
func checkRate(a Algorithm, field string, limit int64, window time.Duration, burst int64) (quotaSpec, error) {
	var q quotaSpec
	if field != "" {
		if limit == 0 {
			return q, fmt.Errorf("%w: %sLimit is 0: every quota needs a Limit and a Window", ErrInvalidPolicy, field)
		}
		if window == 0 {
			return q, fmt.Errorf("%w: %sWindow is 0: every quota needs a Limit and a Window", ErrInvalidPolicy, field)
		}
	}
	if limit < 0 {
		return q, fmt.Errorf("%w: %sLimit %d is negative (0 means the default %d)", ErrInvalidPolicy, field, limit, defaultLimit)
	}
	if window < 0 {
		return q, fmt.Errorf("%w: %sWindow %v is negative (0 means the default %v)", ErrInvalidPolicy, field, window, defaultWindow)
	}
	if window > maxWindow {
		return q, fmt.Errorf("%w: %sWindow %v is over the maximum %v", ErrInvalidPolicy, field, window, maxWindow)
	}
	if window%time.Millisecond != 0 {
		return q, fmt.Errorf("%w: %sWindow %v is not a whole number of milliseconds", ErrInvalidPolicy, field, window)
	}
	if burst < 0 {
		return q, fmt.Errorf("%w: %sBurst %d is negative", ErrInvalidPolicy, field, burst)
	}
	// Limit and Burst reach clients as header integers (q=, r=,
	// RateLimit-Limit, ...): RFC 9651 Integers have at most 15 digits.
	if limit > maxHeaderInt {
		return q, fmt.Errorf("%w: %sLimit %d has more than 15 digits, the most a RateLimit header integer may carry (RFC 9651); lower Limit (or Window with it)", ErrInvalidPolicy, field, limit)
	}
	if burst > maxHeaderInt {
		return q, fmt.Errorf("%w: %sBurst %d has more than 15 digits, the most a RateLimit header integer may carry (RFC 9651); lower Burst", ErrInvalidPolicy, field, burst)
	}
	q.limit, q.windowMS = limit, window.Milliseconds()
	if q.limit == 0 {
		q.limit = defaultLimit
	}
	if q.windowMS == 0 {
		q.windowMS = defaultWindow.Milliseconds()
	}
	switch a {
	case TokenBucket:
		q.burst = burst
		if q.burst == 0 {
			q.burst = q.limit
		}
		if err := checkTokenBucket(q.limit, q.windowMS, q.burst); err != nil {
			if field != "" {
				err = fmt.Errorf("%s: %w", strings.TrimSuffix(field, "."), err)
			}
			return q, err
		}
	default:
		if burst != 0 {
			return q, fmt.Errorf("%w: %sBurst is only used by TokenBucket (Algorithm is %v)", ErrInvalidPolicy, field, a)
		}
		// The sliding-window test sums prev*(W-e) + (curr+cost)*W with every
		// count at most Limit: below 3*Limit*W. Keep 4*Limit*W under 2^53.
		if q.limit > maxExact/4/q.windowMS {
			return q, fmt.Errorf("%w: %sLimit %d with Window %d ms exceeds exact integer arithmetic (4*Limit*Window must stay below 2^53); lower Limit or Window", ErrInvalidPolicy, field, q.limit, q.windowMS)
		}
	}
	return q, nil
}

// resolveSet validates the quotas of one plan (rates; field names their
// place in errors) and checks the policy's Cost against each capacity.
func (p *Policy) resolveSet(rates []Rate, field string, cost int64) (quotaSet, error) {
	var set quotaSet
	if len(rates) > limitstore.MaxQuotas {
		return set, fmt.Errorf("%w: %s holds %d quotas, more than MaxQuotas (%d)", ErrInvalidPolicy, field, len(rates), limitstore.MaxQuotas)
	}
	for i, rt := range rates {
		place := fmt.Sprintf("%s[%d].", field, i)
		q, err := checkQuota(p.Algorithm, place, rt.Limit, rt.Window, rt.Burst, rt.Per, rt.Location)
		if err != nil {
			return set, err
		}
		for j := range i {
			if o := set.q[j]; repeats(&o, &q) {
				return set, fmt.Errorf("%w: %s[%d] repeats %s[%d]: quotas of one policy count distinct windows (one window is one record, whatever the Limits)", ErrInvalidPolicy, field, i, field, j)
			}
		}
		if c := q.capacity(p.Algorithm); cost > c {
			return set, fmt.Errorf("%w: Cost %d exceeds the capacity %d of %s[%d], so no request could ever be admitted", ErrInvalidPolicy, cost, c, field, i)
		}
		set.q[i] = q
	}
	set.n = len(rates)
	return set, nil
}

func (p *Policy) resolve() (resolved, error) {
	var r resolved
	if p.Cost < 0 {
		return r, fmt.Errorf("%w: Cost %d is negative (0 means the default %d)", ErrInvalidPolicy, p.Cost, defaultCost)
	}
	if p.Algorithm > Concurrency {
		return r, fmt.Errorf("%w: Algorithm %d is unknown", ErrInvalidPolicy, p.Algorithm)
	}
	if p.Scope > PerRoute {
		return r, fmt.Errorf("%w: Scope %d is unknown", ErrInvalidPolicy, p.Scope)
	}
	if p.FailureMode > FailClosed {
		return r, fmt.Errorf("%w: FailureMode %d is unknown", ErrInvalidPolicy, p.FailureMode)
	}
	if p.Disclosure > DiscloseAlways {
		return r, fmt.Errorf("%w: Disclosure %d is unknown", ErrInvalidPolicy, p.Disclosure)
	}
	if p.HeaderStyle > HeadersIETF|HeadersTriplet|HeadersLegacy {
		return r, fmt.Errorf("%w: HeaderStyle %d has unknown bits", ErrInvalidPolicy, p.HeaderStyle)
	}
	if p.Name != "" {
		if err := checkName("Name", p.Name); err != nil {
			return r, err
		}
	}
	if p.ProblemType != "" {
		if err := checkURIReference(p.ProblemType); err != nil {
			return r, fmt.Errorf("%w: ProblemType %q is not a URI reference (RFC 3986): %v", ErrInvalidPolicy, p.ProblemType, err)
		}
	}
	for i, path := range p.SkipPaths {
		if path == "" || path[0] != '/' {
			return r, fmt.Errorf("%w: SkipPaths[%d] %q does not start with '/' (paths are compared with Request.Path exactly)", ErrInvalidPolicy, i, path)
		}
	}
	r.cost = p.Cost
	if r.cost == 0 {
		r.cost = defaultCost
	}
	if p.Algorithm == Concurrency {
		return p.resolveConcurrency(r)
	}
	if err := p.checkMaxWait(); err != nil {
		return r, err
	}
	if err := p.checkBlock(); err != nil {
		return r, err
	}
	var def quotaSet
	if len(p.Quotas) > 0 {
		if p.Limit != 0 || p.Window != 0 || p.Burst != 0 {
			return r, fmt.Errorf("%w: Limit, Window and Burst must be zero when Quotas is set (each quota is a Rate in Quotas)", ErrInvalidPolicy)
		}
		if p.Per != 0 || p.Location != nil {
			return r, fmt.Errorf("%w: Per and Location must be zero when Quotas is set (a calendar quota is a Rate in Quotas with its own Per and Location)", ErrInvalidPolicy)
		}
		var err error
		if def, err = p.resolveSet(p.Quotas, "Quotas", r.cost); err != nil {
			return r, err
		}
	} else {
		q, err := checkQuota(p.Algorithm, "", p.Limit, p.Window, p.Burst, p.Per, p.Location)
		if err != nil {
			return r, err
		}
		if c := q.capacity(p.Algorithm); r.cost > c {
			return r, fmt.Errorf("%w: Cost %d exceeds the capacity %d, so no request could ever be admitted", ErrInvalidPolicy, r.cost, c)
		}
		def.n, def.q[0] = 1, q
	}
	if p.Plans != nil && p.Plan == nil {
		return r, fmt.Errorf("%w: Plans is set but Plan is nil: set Plan, the function that names each request's plan", ErrInvalidPolicy)
	}
	if p.DefaultPlan != "" {
		if err := checkName("DefaultPlan", p.DefaultPlan); err != nil {
			return r, err
		}
		if _, ok := p.Plans[p.DefaultPlan]; ok {
			return r, fmt.Errorf("%w: DefaultPlan %q is also a key of Plans: name the default plan (the Policy's own quotas) apart from the other plans", ErrInvalidPolicy, p.DefaultPlan)
		}
	}
	r.plans = append(r.plans, plan{label: p.DefaultPlan, sets: [2]quotaSet{def}})
	names := make([]string, 0, len(p.Plans))
	for name := range p.Plans {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := checkName("Plans key", name); err != nil {
			return r, err
		}
		rates := p.Plans[name]
		if len(rates) == 0 {
			return r, fmt.Errorf("%w: Plans[%q] holds no quota", ErrInvalidPolicy, name)
		}
		set, err := p.resolveSet(rates, fmt.Sprintf("Plans[%q]", name), r.cost)
		if err != nil {
			return r, err
		}
		r.plans = append(r.plans, plan{name: name, label: name, sets: [2]quotaSet{set}})
	}
	if p.MaxWait > 0 {
		ms := p.MaxWait.Milliseconds()
		for _, pl := range r.plans {
			set := &pl.sets[0]
			for i := range set.n {
				if q := &set.q[i]; ms > maxTokenBucketUnits/q.limit {
					return r, fmt.Errorf("%w: MaxWait %v times Limit %d exceeds 2^50, the bound of exact arithmetic; lower MaxWait", ErrInvalidPolicy, p.MaxWait, q.limit)
				}
			}
		}
	}
	sigs := make([]string, def.n)
	for i := range def.n {
		q := &def.q[i]
		sigs[i] = q.signature(p.Algorithm)
	}
	r.signature = strings.Join(sigs, "+")
	return r, nil
}

// maxMaxWait is the longest Policy.MaxWait New accepts.
const maxMaxWait = time.Hour

// defaultMaxWaiting is Policy.MaxWaiting's default.
const defaultMaxWaiting = 1024

// checkMaxWait validates MaxWait and MaxWaiting.
func (p *Policy) checkMaxWait() error {
	switch {
	case p.MaxWait < 0:
		return fmt.Errorf("%w: MaxWait %v is negative (0: no waiting)", ErrInvalidPolicy, p.MaxWait)
	case p.MaxWaiting < 0:
		return fmt.Errorf("%w: MaxWaiting %d is negative (0 means the default %d)", ErrInvalidPolicy, p.MaxWaiting, defaultMaxWaiting)
	case p.MaxWait == 0 && p.MaxWaiting != 0:
		return fmt.Errorf("%w: MaxWaiting is set but MaxWait is 0: MaxWaiting bounds the requests waiting for a slot, and without MaxWait none waits", ErrInvalidPolicy)
	case p.MaxWait == 0:
		return nil
	case p.Algorithm != TokenBucket:
		return fmt.Errorf("%w: MaxWait needs Algorithm TokenBucket (Algorithm is %v): only a token bucket reserves a future slot; use TokenBucket to let requests wait", ErrInvalidPolicy, p.Algorithm)
	case p.MaxWait%time.Millisecond != 0:
		return fmt.Errorf("%w: MaxWait %v is not a whole number of milliseconds", ErrInvalidPolicy, p.MaxWait)
	case p.MaxWait > maxMaxWait:
		return fmt.Errorf("%w: MaxWait %v exceeds the maximum %v", ErrInvalidPolicy, p.MaxWait, maxMaxWait)
	case p.Shadow:
		return fmt.Errorf("%w: MaxWait with Shadow: a shadow policy never delays a request; drop one of them", ErrInvalidPolicy)
	}
	return nil
}

// signature is "<limit>p<window>" with the window in seconds (or "<n>ms" when
// not whole seconds), plus the algorithm letter when it is not the default
// sliding window, plus "b<burst>" for a token bucket whose Burst differs from
// Limit: "100p60", "5p60f", "1p1gb5".
func signature(a Algorithm, limit, windowMS, burst int64) string {
	b := strconv.AppendInt(nil, limit, 10)
	b = append(b, 'p')
	if windowMS%1000 == 0 {
		b = strconv.AppendInt(b, windowMS/1000, 10)
	} else {
		b = strconv.AppendInt(b, windowMS, 10)
		b = append(b, "ms"...)
	}
	if a != SlidingWindow {
		b = append(b, letter(a))
	}
	if a == TokenBucket && burst != limit {
		b = append(b, 'b')
		b = strconv.AppendInt(b, burst, 10)
	}
	return string(b)
}

// checkName validates a policy Name (or a Plans key, field says which): printable ASCII (0x20-0x7e), no ':', not
// blank. Quotes and backslashes are allowed; header writers escape them as
// RFC 9651 strings.
func checkName(field, name string) error {
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("%w: %s %q is blank", ErrInvalidPolicy, field, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: %s %q contains a byte that is not printable ASCII at %d", ErrInvalidPolicy, field, name, i)
		}
		if c == ':' {
			return fmt.Errorf("%w: %s %q contains ':', the store key separator", ErrInvalidPolicy, field, name)
		}
	}
	return nil
}

// checkURIReference reports whether s is an RFC 3986 URI-reference: only
// unreserved, reserved and '%' HEXDIG HEXDIG bytes, and parseable by
// net/url. Characters that would need escaping in JSON ('"', '\') or in a
// header are thereby excluded.
func checkURIReference(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0:
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return fmt.Errorf("malformed %%-escape at byte %d", i)
			}
		default:
			return fmt.Errorf("byte %#x at %d is not allowed in a URI", c, i)
		}
	}
	if _, err := url.Parse(s); err != nil {
		return err
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
