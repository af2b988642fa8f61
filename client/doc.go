// Package limitclient is an http.RoundTripper that honours the rate limits
// servers announce: Retry-After (RFC 9110 10.2.3), the RateLimit and
// RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers (several
// policies; the r, t, q and w parameters), the draft's earlier triplet
// (RateLimit-Remaining and RateLimit-Reset), and the legacy
// X-RateLimit-Remaining and X-RateLimit-Reset when that is all a server
// sends. It needs only the standard library and works with any server,
// quotagate or not:
//
//	client := &http.Client{Transport: limitclient.New(http.DefaultTransport)}
//
// What it does with each answer, per partition (the host by default,
// WithPartition for an API key or a tenant):
//
//   - RateLimit: "p";r=0;t=T (or RateLimit-Remaining: 0 with
//     RateLimit-Reset: T, or X-RateLimit-Remaining: 0 with X-RateLimit-Reset)
//     on any response: the partition's quota is spent for T seconds, or for
//     w/q seconds when RateLimit-Policy gives the same policy's quota q and
//     window w and that is sooner (t is when the whole quota is back; one
//     unit of a quota that frees continuously, a token bucket or a sliding
//     window, is back after w/q; for a fixed window the one early request
//     gets a 429 whose Retry-After is exact). The next requests of that
//     partition wait until then before they are sent. Of several policies
//     the longest wait wins; r > 0 changes nothing.
//   - 429: the partition is spent for the Retry-After, else for what the
//     rate-limit fields say, else for a jittered exponential backoff (from 1 s,
//     doubling); a request that can be replayed is sent again after that
//     wait, up to WithMaxRetries times, and the last answer is returned.
//   - 503 with WithRetry503: sent again after a jittered exponential backoff,
//     never shorter than its Retry-After.
//
// Odd and hostile values have bounded outcomes; none panics and no wait is
// longer than the MaxWait (WithMaxWait, default 30 s) or the request
// context's deadline:
//
//	Retry-After: -5, 1.5, soon, ""     ignored (as absent: the rate-limit fields, else backoff)
//	Retry-After: 99999999999999999999  over any MaxWait: the 429 is returned at once
//	Retry-After: <10 years>            the same
//	Retry-After: <a past HTTP-date>    0: sent again at once (at most WithMaxRetries times)
//	RateLimit with broken syntax       the whole field ignored (RFC 9651: a field that fails to parse)
//	RateLimit r or t negative,         that member ignored
//	  fractional, a string, missing
//	RateLimit r=0;t=<10 years>         over the MaxWait: not remembered, the next request is sent
//	                                    without waiting (nor does a 429's wait past the MaxWait
//	                                    hold the partition: shorter hints after it still count)
//	integers over 15 digits            a parse failure of the field (RFC 9651): ignored
//	unknown parameters and members     ignored
//	RateLimit-Policy q=0 or w=0        the w/q bound not applied (t alone)
//	X-RateLimit-Reset >= 1000000000    Unix epoch seconds; a smaller value delta seconds
//	X-RateLimit-Reset in the past      0
//
// A wait that would pass the MaxWait or the deadline is not started: before
// sending, the request is sent at once (the server decides; a limited answer
// comes back as the 429 it is); after a 429 the response is returned to the
// caller. A context done during a wait ends it with the context's error.
package limitclient
