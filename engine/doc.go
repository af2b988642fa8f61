// Package limit is quotagate's framework-agnostic rate-limiting engine.
//
// A [Limiter] takes an abstract view of one HTTP request ([Request]: matched
// route template, method, path, socket peer, header access, the framework's
// native context), derives whose allowance it draws on (the identity) and which
// allowance (the bucket), asks a [Store] for one atomic decision, and returns a
// [Response]: the [Decision] plus the headers to set and, when the request is
// denied, the status and body to send. Router adapters (chilimit, echolimit,
// ginlimit, fiberlimit, httplimit) only translate their framework's request into
// a [Request] and copy the [Response] back; they hold no policy.
//
// Three algorithms are built in: [SlidingWindow] (the default), [FixedWindow]
// and [TokenBucket] (implemented as GCRA). Their arithmetic lives in this
// package ([Op.Apply]) so that every store gives bit-for-bit identical
// decisions for the same inputs: time is integer milliseconds and every
// intermediate product stays below 2^53, which [New] enforces.
//
// The identity of a request is, first match wins: the policy's KeyFunc; the
// client address from a trusted forwarding header, only when one is
// configured with [WithTrustedHeader] or [WithTrustedProxies] (each states
// its threat model; without them no header is ever read); the socket peer;
// else one shared fallback bucket at Limit/10. Addresses are normalised
// (port and zone dropped, IPv4-mapped IPv6 unmapped, IPv6 grouped by /64) and
// the source is reported as [Decision].KeySource.
//
// What a client is told is decided here as well: [Disclosure] levels, the
// [HeaderStyle] of the RateLimit fields (draft-ietf-httpapi-ratelimit-headers
// -10, the earlier triplet, or X-RateLimit-*), Retry-After (RFC 9110), the
// RFC 9457 problem body (Policy.ProblemType) or a Policy.DenyResponse of the
// caller's. Adapters apply a [Response] with [Response.WriteHeadersTo] or
// [Response.WriteDenial], which also merge the fields of several limiters on
// one request, so every adapter sends the same bytes. Policy.Skip and
// Policy.SkipPaths exempt requests; Policy.OnLimited and Policy.OnStoreError
// observe denials and store failures. docs/response-contract.md in the
// repository shows every level and style.
//
// Non-HTTP call sites use [Limiter.Consume] with an identity string.
//
// The package imports only the standard library.
package limit
