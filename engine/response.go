package limit

import (
	"net/http"
	"strconv"
	"strings"
)

// Disclosure decides what a client is told about its limit. Each level
// includes the one before: None < RetryAfter < OnLimit < Always. The zero
// value is DiscloseRetryAfter. Disclosure never changes enforcement or metrics.
type Disclosure uint8

const (
	// DiscloseRetryAfter (the default): a denial carries Retry-After and the
	// RFC 9457 problem body; allowed responses carry nothing.
	DiscloseRetryAfter Disclosure = iota
	// DiscloseNone: a denial is a bare status with no body and no rate-limit
	// headers (only Cache-Control: no-store).
	DiscloseNone
	// DiscloseOnLimit: as RetryAfter, plus the RateLimit headers on denials.
	DiscloseOnLimit
	// DiscloseAlways: as OnLimit, plus the RateLimit headers on every response.
	DiscloseAlways
)

// level orders the disclosure levels: 0 None, 1 RetryAfter, 2 OnLimit, 3 Always.
func (d Disclosure) level() int {
	switch d {
	case DiscloseNone:
		return 0
	case DiscloseOnLimit:
		return 2
	case DiscloseAlways:
		return 3
	}
	return 1
}

// HeaderStyle selects which rate-limit header fields are sent; styles combine
// with | (several at once during a migration). The zero value is HeadersIETF.
type HeaderStyle uint8

const (
	// HeadersIETF: draft-ietf-httpapi-ratelimit-headers-10 Structured Field
	// lists, RateLimit-Policy: "<name>";q=<limit>;w=<window s> and
	// RateLimit: "<name>";r=<remaining>;t=<s>.
	HeadersIETF HeaderStyle = 1 << iota
	// HeadersTriplet: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
	// (delta seconds) and RateLimit-Policy: <limit>;w=<window s>, as in the
	// draft's revisions up to -06.
	HeadersTriplet
	// HeadersLegacy: X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix epoch seconds), the de-facto convention.
	HeadersLegacy
)

// Header field names, in Go's canonical form so that http.Header lookups
// find them (HTTP field names are case-insensitive on the wire).
const (
	HeaderRetryAfter         = "Retry-After"
	HeaderCacheControl       = "Cache-Control"
	HeaderContentType        = "Content-Type"
	HeaderRateLimitPolicy    = "Ratelimit-Policy"
	HeaderRateLimit          = "Ratelimit"
	HeaderRateLimitLimit     = "Ratelimit-Limit"
	HeaderRateLimitRemaining = "Ratelimit-Remaining"
	HeaderRateLimitReset     = "Ratelimit-Reset"
	HeaderXRateLimitLimit    = "X-Ratelimit-Limit"
	HeaderXRateLimitRemain   = "X-Ratelimit-Remaining"
	HeaderXRateLimitReset    = "X-Ratelimit-Reset"
)

// ProblemJSON is the RFC 9457 media type of denial bodies.
const ProblemJSON = "application/problem+json"

// Default denial bodies (RFC 9457). They restate neither the limit nor the
// delay and never carry an error string or the client's identity.
var (
	body429 = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429}`)
	body503 = []byte(`{"type":"about:blank","title":"Service Unavailable","status":503}`)
)

// Field is one response header line.
type Field struct {
	Name  string
	Value string
}

// maxFields bounds the header lines of one Response: IETF (2), Triplet (4),
// Legacy (3), Retry-After, Cache-Control and Content-Type.
const maxFields = 12

// Response is what an adapter writes for one request: Check returns it by
// value (no allocation). When Denied, the adapter sets Fields, writes Status
// and Body, and does not call the next handler; otherwise it sets Fields
// (possibly none) and calls the next handler.
type Response struct {
	// Decision is the engine's decision.
	Decision Decision
	// Status is 0 when the request proceeds, else the status to send
	// (429 Too Many Requests per RFC 6585, or 503 under FailClosed).
	Status int
	// Body is the denial body (nil for none). It is shared: do not modify.
	Body []byte

	fields [maxFields]Field
	n      int
}

// Denied reports whether the adapter must send Status and Body instead of
// calling the next handler.
func (r Response) Denied() bool { return r.Status != 0 }

// Fields returns the header lines to add to the response, in order.
func (r *Response) Fields() []Field { return r.fields[:r.n] }

func (r *Response) add(name, value string) {
	if r.n < maxFields {
		r.fields[r.n] = Field{name, value}
		r.n++
	}
}

// WriteHeaders adds Fields to h. Values are added, not set, so that two
// limiters on one request (a global and a per-route mount) both appear as
// members of the same RateLimit lists, in mount order.
func (r *Response) WriteHeaders(h http.Header) {
	for _, f := range r.fields[:r.n] {
		h[f.Name] = append(h[f.Name], f.Value)
	}
}

// WriteDenial writes the whole denial (Fields, Status, Body) to w. It is a
// no-op when the request is not Denied. net/http based adapters call it.
func (r *Response) WriteDenial(w http.ResponseWriter) {
	if !r.Denied() {
		return
	}
	r.WriteHeaders(w.Header())
	if len(r.Body) > 0 {
		w.Header().Set("Content-Length", strconv.Itoa(len(r.Body)))
	}
	w.WriteHeader(r.Status)
	if len(r.Body) > 0 {
		_, _ = w.Write(r.Body)
	}
}

// headerSet holds a limiter's constant header values, built once by New.
type headerSet struct {
	quoted     string // the policy name as an RFC 9651 string: "100p60"
	ietfPolicy string // "100p60";q=100;w=60
	triplet    string // 100;w=60
	limit      string // 100
	windowS    int64
}

func newHeaderSet(name string, res resolved) headerSet {
	h := headerSet{quoted: quoteSF(name), windowS: ceilDiv(res.windowMS, 1000)}
	h.limit = strconv.FormatInt(res.limit, 10)
	h.ietfPolicy = h.policyValue(res.limit)
	h.triplet = h.limit + ";w=" + strconv.FormatInt(h.windowS, 10)
	return h
}

func (h *headerSet) policyValue(limit int64) string {
	return h.quoted + ";q=" + strconv.FormatInt(limit, 10) + ";w=" + strconv.FormatInt(h.windowS, 10)
}

// quoteSF renders s as an RFC 9651 sf-string: in double quotes, with '"' and
// '\' escaped by a backslash. s is printable ASCII (checked by New).
func quoteSF(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// RetryAfterSeconds converts a delay into an RFC 9110 (10.2.3) Retry-After
// delay-seconds value: whole seconds rounded up, never below 1, so that a
// client that obeys it is never early (9.5 s -> 10, 0.3 s -> 1).
func RetryAfterSeconds(d Decision) int64 {
	return max(ceilDiv(d.RetryAfter.Milliseconds(), 1000), 1)
}

// respond fills the header fields, status and body of resp from its Decision
// and the policy's Disclosure and HeaderStyle. storeFailed marks a decision
// taken without the store (no numbers to disclose).
func (l *Limiter) respond(resp *Response, storeFailed bool) {
	d := &resp.Decision
	level := l.policy.Disclosure.level()
	if d.Allowed {
		if level >= 3 && d.Outcome != OutcomeDegraded {
			l.rateLimitFields(resp, ceilDiv(d.ResetAfter.Milliseconds(), 1000))
		}
		return
	}
	resp.Status = http.StatusTooManyRequests
	resp.Body = body429
	if storeFailed && l.policy.FailureMode == FailClosed {
		resp.Status, resp.Body = http.StatusServiceUnavailable, body503
	}
	retry := RetryAfterSeconds(*d)
	if level >= 2 && resp.Status == http.StatusTooManyRequests {
		l.rateLimitFields(resp, retry)
	}
	if level >= 1 {
		resp.add(HeaderRetryAfter, strconv.FormatInt(retry, 10))
		resp.add(HeaderContentType, ProblemJSON)
	} else {
		resp.Body = nil
	}
	resp.add(HeaderCacheControl, "no-store")
}

// rateLimitFields adds the RateLimit fields of every selected style. t is the
// delta seconds until quota frees: on a denial, the Retry-After value, so
// that Retry-After is never earlier than t.
func (l *Limiter) rateLimitFields(resp *Response, t int64) {
	d := &resp.Decision
	style := l.policy.HeaderStyle
	if style == 0 {
		style = HeadersIETF
	}
	var buf [64]byte
	limit := l.headers.limit
	if d.Limit != l.res.limit { // the fallback bucket's tightened limit
		limit = strconv.FormatInt(d.Limit, 10)
	}
	if style&HeadersIETF != 0 {
		pol := l.headers.ietfPolicy
		if d.Limit != l.res.limit {
			pol = l.headers.policyValue(d.Limit)
		}
		resp.add(HeaderRateLimitPolicy, pol)
		b := append(buf[:0], l.headers.quoted...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
		resp.add(HeaderRateLimit, string(b))
	}
	if style&HeadersTriplet != 0 {
		tr := l.headers.triplet
		if d.Limit != l.res.limit {
			tr = limit + ";w=" + strconv.FormatInt(l.headers.windowS, 10)
		}
		resp.add(HeaderRateLimitPolicy, tr)
		resp.add(HeaderRateLimitLimit, limit)
		resp.add(HeaderRateLimitRemaining, strconv.FormatInt(d.Remaining, 10))
		resp.add(HeaderRateLimitReset, strconv.FormatInt(t, 10))
	}
	if style&HeadersLegacy != 0 {
		resp.add(HeaderXRateLimitLimit, limit)
		resp.add(HeaderXRateLimitRemain, strconv.FormatInt(d.Remaining, 10))
		// Unix epoch seconds of the same instant as t: the store's now + t.
		nowMS := d.ResetAt.UnixMilli() - d.ResetAfter.Milliseconds()
		resp.add(HeaderXRateLimitReset, strconv.FormatInt(ceilDiv(nowMS, 1000)+t, 10))
	}
}
