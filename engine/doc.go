// Package limit is quotagate's framework-agnostic rate-limiting engine.
//
// A [Limiter] takes an abstract view of one HTTP request ([Request]: matched
// route template, method, path, socket peer, header access, the framework's
// native context), derives which allowance it draws on (the bucket) and whose
// (the identity), asks a [limitstore.Store] for one atomic decision, and
// writes the answer into the framework's response: the header fields to set
// (allowed or not) and, when the request is limited, the status and body. It
// returns the [Decision]; the adapter calls the next handler when it is
// Allowed.
//
// Router adapters (chilimit, echolimit, ginlimit, fiberlimit, httplimit) and
// the gRPC interceptors (grpclimit) are translation and nothing else: the
// request into a [Request], the response as a [ResponseWriter] (net/http's
// is built in: [Limiter.CheckHTTP] and [Limiter.HTTPHandler]), and continue
// or abort the framework's way. They hold no policy and write nothing
// themselves, so every adapter sends the same bytes. Typed key, cost and
// plan functions over a framework's context come from [KeyFuncOf],
// [CostFuncOf] and [PlanFuncOf].
//
// Three rate algorithms are built in: [SlidingWindow] (the default),
// [FixedWindow] (also per calendar day, week, month or year: Policy.Per) and
// [TokenBucket] (implemented as GCRA); [Concurrency] bounds the requests of
// an identity in flight at once instead. A policy may hold several quotas
// applied all or nothing in one store call (Policy.Quotas, each a [Rate]:
// "2 per 10 s and 5 per minute"), quotas per plan chosen per request
// (Policy.Plans and Policy.Plan: an API key's tier), and may run in shadow
// mode (Policy.Shadow: counted and reported, never enforced). Their
// arithmetic lives in package limitstore (limitstore.Op.Apply), the store
// contract, so that every store gives bit-for-bit identical decisions for
// the same inputs: time is integer milliseconds and every
// intermediate product stays below 2^53, which [New] enforces.
//
// The identity of a request is, first match wins: the policy's KeyFunc; the
// client address from a trusted forwarding header, only when one is
// configured with [WithTrustedHeader] or [WithTrustedProxies] (each states
// its threat model; without them no header is ever read); the socket peer;
// else one shared fallback bucket per policy at max(Cost, Limit/10) (a token
// bucket divides Burst instead; [WithFallbackDivisor] sets the 10).
// Addresses are normalised
// (port and zone dropped, IPv4-mapped IPv6 unmapped, IPv6 grouped by /64) and
// the source is reported as [Decision].KeySource.
//
// What a client is told is decided here as well: [Disclosure] levels, the
// [HeaderStyle] of the RateLimit fields (draft-ietf-httpapi-ratelimit-headers
// -10, the earlier triplet, or X-RateLimit-*), Retry-After (RFC 9110), the
// RFC 9457 problem body (Policy.ProblemType) or a Policy.LimitedResponse of
// the caller's; the fields of several limiters on one request merge.
// Policy.Skip and Policy.SkipPaths exempt requests; Policy.OnLimited and
// Policy.OnStoreError observe limited requests and store failures.
//
// One rule holds on every router: a request no route matches (the router's
// 404 or 405; the adapter sets [Request].Unmatched) counts in the mount's
// Shared bucket, so that scanners are limited; a CORS preflight passes
// uncounted unless Policy.LimitPreflights. A cost no wait could admit (above
// Limit, or Burst) is answered without the store: 429 with its own problem
// type and no Retry-After ([Decision].OverCapacity). Every policy [New]
// accepts gives in-range delays, header values and store TTLs; two Limiters
// built separately with the same numbers and no Name on one Store value that
// keeps limitstore.Claims are refused rather than left to share one
// allowance silently (the check sees one Store value in one process; across
// processes, a shared store needs a key prefix per service: [WithKeyPrefix]).
//
// The engine calls its Store straight, with the caller's context. What
// protects a store that does I/O (a timeout, a circuit breaker, a local
// cache of its denials) is the store's own: the guard package wraps any
// Store, and the Redis store wraps itself.
// docs/response-contract.md in the repository shows every level and style.
//
// Non-HTTP call sites use [Limiter.Consume] with an identity string.
//
// The package imports only the standard library. Test doubles (a reference
// store, failing and slow stores, a recording observer, a fake clock) are in
// its limittest package.
package limit
