package limit

import "github.com/quotagate/quotagate/engine/limitstore"

import "time"

// Decision is the engine's answer for one request or Consume call.
//
// Allowed and Outcome say the same fact at two levels of detail: a request
// is either allowed (Outcome allowed or degraded; or skipped, Outcome "")
// or limited (Outcome limited: 429, or 503 under FailClosed).
type Decision struct {
	// Allowed reports whether the request may proceed: the adapter calls the
	// next handler. When false, Check has written the whole response.
	Allowed bool
	// Outcome is allowed, limited, degraded or shadow-limited; "" when Policy.SkipPaths or
	// Policy.Skip exempted the request (Check only: a skipped request is
	// not counted and not reported, so "" never appears in an event).
	Outcome Outcome
	// StoreFailed reports that the shared store failed (error, timeout or
	// panic) and the policy's FailureMode decided: FailOpen admits (Outcome
	// degraded); FailLocal admits (degraded) or limits (limited) by the
	// local store's numbers; FailClosed rejects with 503 (limited).
	StoreFailed bool
	// Limit is the quota per window that decided: with several quotas the
	// one closest to exhaustion, whose Remaining and ResetAfter are
	// reported (reduced for the fallback bucket).
	Limit int64
	// Cost is what the request was priced at (Policy.Cost, CostFunc or the
	// n of ConsumeN); 0 for a skipped request.
	Cost int64
	// Remaining is how many more cost-1 requests would be admitted now;
	// never negative; 0 when no store decided (FailOpen, FailClosed).
	Remaining int64
	// ResetAfter is the time until the whole quota is back (FixedWindow: the
	// end of the window); 0 when no store decided.
	ResetAfter time.Duration
	// RetryAfter is, when limited, the earliest time after which the same
	// request will be admitted with no further traffic (1 s under
	// FailClosed); 0 when allowed, and 0 when OverCapacity (no wait admits
	// it).
	RetryAfter time.Duration
	// OverCapacity reports a request whose cost exceeds the quota's
	// capacity (Limit, or Burst for TokenBucket; for requests without an
	// identity, the fallback bucket's reduced capacity), so that no wait
	// would ever admit it: a CostFunc or ConsumeN cost above it. The engine
	// answers it without asking the store, takes nothing from the quota,
	// and the Decision is limited (Outcome limited) with RetryAfter 0 and
	// no numbers (Remaining, ResetAfter and ResetAt zero). Check answers 429
	// with its own RFC 9457 problem type,
	// https://github.com/quotagate/quotagate/blob/main/docs/response-contract.md#cost-exceeds-quota,
	// and neither Retry-After nor RateLimit fields, so that no client is
	// told to retry a request that cannot succeed; OnLimited and
	// LimitedResponse run as for any limited request.
	OverCapacity bool
	// ResetAt is the store's clock reading plus ResetAfter; the zero Time
	// when no store decided.
	ResetAt time.Time
	// Bucket is the bucket name.
	Bucket string
	// KeySource is where the identity came from.
	KeySource KeySource
	// Policy is the deciding policy (read-only).
	Policy *Policy
	// Waited is how long the request waited for the slot it reserved
	// (Policy.MaxWait) before it was admitted, or, when its context ended
	// first (or its slot began after the context's deadline), before it
	// gave the slot back and was limited; 0 when it did not wait.
	Waited time.Duration
	// Plan is the plan that decided: a key of Policy.Plans, or
	// Policy.DefaultPlan ("" unless set) for the default plan (the Policy's
	// own quotas).
	Plan string

	// numbers reports that a store (the shared one, or FailLocal's local
	// one) produced Remaining, ResetAfter and ResetAt, so that they may be
	// disclosed in RateLimit header fields.
	numbers bool
	// quota is the index of the quota reported (closest to exhaustion;
	// for OverCapacity the one the cost exceeds) in the decision's quotaSet.
	quota int
	// charge is what Limiter.Finish may give back (finish.go).
	charge charge
	// waitMS is, for an admitted request, the time from the store's
	// decision until the slot it reserved begins (the latest quota's);
	// 0: admitted at once.
	waitMS int64
	// who is the identity decided for (see Identity).
	who who
	// Blocked reports that a block (Policy.BlockFor) limits the request:
	// one in force, or the one this request began; RetryAfter is then at
	// least the time left on it. Under Shadow the request is admitted
	// (OutcomeShadowLimited) and Blocked still says so. A Peek reports the
	// block a request would meet or begin.
	Blocked bool
	// blockStarted reports that this request began the block.
	blockStarted bool
	// slot is the hold of an admitted Concurrency request on its slots,
	// which Finish gives back; slotGen tells this hold from a later one on
	// the same pooled slot. nil: none.
	slot    *slot
	slotGen uint64
	// busy reports that a Concurrency store denied: every slot taken (a
	// 429 without RateLimit fields, not FailClosed's 503).
	busy bool
}

// Identity returns the identity the Decision is about, in the spelling
// Limiter.Peek and Limiter.Reset take: what KeyFunc returned (or the
// identity given to Consume), or the client address grouped by the
// configured prefix ("2001:db8::" for 2001:db8::1 under the default /64,
// "192.0.2.1" under /32). It is "" for the fallback bucket (no identity)
// and for a skipped request. It allocates only for an address (its text
// is built on each call), never on the request path.
func (d Decision) Identity() string {
	switch {
	case d.who.src == KeySourceFallback:
		return ""
	case d.who.text != "":
		return d.who.text
	case d.who.addr.IsValid():
		return d.who.addr.String()
	}
	return ""
}

// Outcome is what the engine did with a request; it is the outcome label of
// quotagate_requests_total.
type Outcome string

const (
	// OutcomeAllowed: the store admitted the request.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeLimited: the request was limited (429), or limited by the local
	// store under FailLocal, or rejected (503) under FailClosed.
	OutcomeLimited Outcome = "limited"
	// OutcomeDegraded: the store failed and the request was admitted without
	// a shared decision (FailOpen, or FailLocal admitting it).
	OutcomeDegraded Outcome = "degraded"
	// OutcomeShadowLimited: a Policy.Shadow policy would have limited the
	// request, and admitted it.
	OutcomeShadowLimited Outcome = "shadow-limited"
)

// KeySource says where the identity of a request came from; it is the
// key_source label of quotagate_requests_total.
type KeySource string

const (
	// KeySourceKeyFunc: Policy.KeyFunc returned a non-blank identity.
	KeySourceKeyFunc KeySource = "key-func"
	// KeySourceHeader: the trusted client-address header.
	KeySourceHeader KeySource = "header"
	// KeySourceSocket: the socket peer address.
	KeySourceSocket KeySource = "socket"
	// KeySourceFallback: no identity at all; the shared fallback bucket.
	KeySourceFallback KeySource = "fallback"
	// KeySourceConsume: the identity passed to Limiter.Consume.
	KeySourceConsume KeySource = "consume"
)

// maxDelayMS bounds every delay a Decision reports, in ms: 800 days, above
// the longest any accepted policy produces (two 366-day sliding windows
// and 1 s; a TokenBucket's refill time and MaxWait), so that only a Store outside the contract reaches it, and
// even then the Durations (which overflow past ~292 years), the header
// values and X-RateLimit-Reset stay in range.
const maxDelayMS = 800 * 24 * 3600 * 1000

// fill writes a store's Result into d: the numbers of the quota closest to
// exhaustion (the least Remaining, then the latest reset), and for a limited request the latest
// Retry-After of the quotas that limit it; every delay clamped to
// [0, maxDelayMS] and Remaining to [0, maxHeaderInt].
func (d *Decision) fill(res *limitstore.Result) {
	d.Allowed = res.Allowed
	d.Outcome = OutcomeLimited
	if res.Allowed {
		d.Outcome = OutcomeAllowed
	}
	q := &res.Quotas[0]
	retry := q.RetryAfterMS
	d.quota = 0
	for i := 1; i < min(res.N, limitstore.MaxQuotas); i++ {
		qi := &res.Quotas[i]
		if qi.Remaining < q.Remaining || qi.Remaining == q.Remaining && qi.ResetAfterMS > q.ResetAfterMS {
			q, d.quota = qi, i
		}
		if !qi.Allowed {
			retry = max(retry, qi.RetryAfterMS)
		}
	}
	if res.Allowed {
		retry = 0
	}
	reset, retry := min(max(q.ResetAfterMS, 0), maxDelayMS), min(max(retry, 0), maxDelayMS)
	d.Remaining = min(max(q.Remaining, 0), maxHeaderInt)
	d.ResetAfter = time.Duration(reset) * time.Millisecond
	d.RetryAfter = time.Duration(retry) * time.Millisecond
	d.ResetAt = time.UnixMilli(res.NowMS + reset)
	d.numbers = true
	d.waitMS = 0
	d.charge.lease = res.Lease
	for i := range min(res.N, limitstore.MaxQuotas) {
		d.charge.windows[i], d.charge.epochs[i] = res.Quotas[i].Window, res.Quotas[i].Epoch
		if res.Allowed {
			d.waitMS = max(d.waitMS, min(res.Quotas[i].WaitMS, maxDelayMS))
		}
	}
	d.fillBlock(res)
}
