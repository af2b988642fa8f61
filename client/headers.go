package limitclient

import (
	"net/http"
	"time"
)

// Header field names in Go's canonical form, so that a direct map lookup
// finds them (http.Header.Get would canonicalise the name on every call).
const (
	hRetryAfter          = "Retry-After"
	hRateLimit           = "Ratelimit"
	hRateLimitPolicy     = "Ratelimit-Policy"
	hRateLimitRemaining  = "Ratelimit-Remaining"
	hRateLimitReset      = "Ratelimit-Reset"
	hXRateLimitRemaining = "X-Ratelimit-Remaining"
	hXRateLimitReset     = "X-Ratelimit-Reset"
)

// maxHint bounds every delay read from a header (100 years): a larger or
// overflowing value counts as this long, which is far past any MaxWait, so
// that arithmetic on instants can never overflow.
const maxHint = 100 * 365 * 24 * time.Hour

// epochThreshold separates the two readings of X-RateLimit-Reset: a value at
// or above it (2001-09-09) is Unix epoch seconds, a smaller one delta seconds.
const epochThreshold = 1_000_000_000

// retryAfter reads the Retry-After field (RFC 9110 10.2.3): delay-seconds
// (digits only; a value too large to represent counts as maxHint) or an
// HTTP-date in any of the three forms RFC 9110 asks recipients to accept (a
// date in the past is 0). It reports false when the field is absent or holds
// anything else (a negative, fractional or non-numeric value).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	vs := h[hRetryAfter]
	if len(vs) == 0 {
		return 0, false
	}
	v := trimOWS(vs[0])
	if s, ok := digits(v); ok {
		return seconds(s), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampHint(t.Sub(now)), true
}

// spent reads the rate-limit fields of a response and returns how long the
// partition's quota stays spent, when a field says it is: the RateLimit and
// RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers when
// present, else RateLimit-Remaining/-Reset (the draft's earlier triplet), else
// X-RateLimit-Remaining/-Reset. It reports false when nothing says the quota
// is spent.
//
// With the RateLimit field a member (policy) whose r is 0 is spent for its t
// seconds; when RateLimit-Policy names the same policy with its quota q and
// window w, for at most w/q seconds, the time one unit of a quota that frees
// continuously (a token bucket, a sliding window) takes to come back; t is
// when the whole quota is back. The longest wait of all members wins. A
// member without a valid r, a spent one without a valid t, and a field that
// is not a valid Structured Field List are ignored.
func spent(h http.Header, now time.Time) (time.Duration, bool) {
	if lines := h[hRateLimit]; len(lines) > 0 {
		var limits members
		if !parseList(lines, &limits) {
			return 0, false
		}
		var policies members
		if !parseList(h[hRateLimitPolicy], &policies) {
			policies.n = 0
		}
		var wait time.Duration
		found := false
		for i := 0; i < limits.n; i++ {
			m := &limits.m[i]
			if m.r != 0 || m.t < 0 {
				continue
			}
			w := seconds(m.t)
			if p := policies.find(m.name); p != nil && p.q > 0 && p.w > 0 {
				w = min(w, perUnit(p.q, p.w))
			}
			if !found || w > wait {
				wait, found = w, true
			}
		}
		return wait, found
	}
	if rem, ok := number(h[hRateLimitRemaining]); ok {
		if rem != 0 {
			return 0, false
		}
		reset, ok := number(h[hRateLimitReset])
		return seconds(reset), ok
	}
	if rem, ok := number(h[hXRateLimitRemaining]); ok {
		if rem != 0 {
			return 0, false
		}
		reset, ok := number(h[hXRateLimitReset])
		if !ok {
			return 0, false
		}
		if reset >= epochThreshold {
			return clampHint(time.Unix(reset, 0).Sub(now)), true
		}
		return seconds(reset), true
	}
	return 0, false
}

// find returns the member named name, or nil.
func (ms *members) find(name string) *member {
	for i := 0; i < ms.n; i++ {
		if ms.m[i].name == name {
			return &ms.m[i]
		}
	}
	return nil
}

// perUnit is w/q seconds: the time one unit of a quota of q per w seconds
// takes to come back.
func perUnit(q, w int64) time.Duration {
	if w > int64(maxHint/time.Second) {
		return maxHint
	}
	return time.Duration(w) * time.Second / time.Duration(q)
}

// number reads the first line of a field holding a plain non-negative
// integer (an overflowing one saturates); false when absent or anything else.
func number(vs []string) (int64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	return digits(trimOWS(vs[0]))
}

// digits parses s as 1*DIGIT, saturating at the seconds of maxHint.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	const limit = int64(maxHint / time.Second)
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < limit {
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, limit), true
}

// seconds converts a non-negative count of seconds to a Duration, at most
// maxHint.
func seconds(s int64) time.Duration {
	if s >= int64(maxHint/time.Second) {
		return maxHint
	}
	return time.Duration(s) * time.Second
}

func clampHint(d time.Duration) time.Duration {
	return min(max(d, 0), maxHint)
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
