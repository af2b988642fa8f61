package limit

import (
	"net/http"
	"net/textproto"
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

// The 503 body of FailClosed (RFC 9457). Like the 429 body built by
// problemBody it restates neither the limit nor the delay and never carries
// an error string or the client's identity.
var body503 = problemBody(DefaultProblemType, http.StatusServiceUnavailable)

// problemBody renders an RFC 9457 problem body with members type, title (the
// status phrase) and status. typ has passed checkURIReference (or is
// "about:blank"), so it needs no JSON escaping.
func problemBody(typ string, status int) []byte {
	if typ == "" {
		typ = DefaultProblemType
	}
	b := append([]byte(`{"type":"`), typ...)
	b = append(b, `","title":"`...)
	b = append(b, http.StatusText(status)...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	return append(b, '}')
}

// Field is one response header line.
type Field struct {
	Name  string
	Value string
}

// maxFields bounds the header lines of one Response: IETF (2), Triplet (4),
// Legacy (3), Retry-After, Cache-Control and Content-Type.
const maxFields = 12

// Response is what an adapter writes for one request: Check returns it by
// value (no allocation). When Denied, the adapter writes the header fields,
// Status and Body, and does not call the next handler; otherwise it writes
// the header fields (none at the default disclosure) and calls the next
// handler. Use WriteHeaders, WriteHeadersTo or WriteDenial rather than
// copying Fields by hand: they apply the merge rules for several limiters
// on one request.
type Response struct {
	// Decision is the engine's decision.
	Decision Decision
	// Status is 0 when the request proceeds, else the status to send
	// (429 Too Many Requests per RFC 6585, 503 under FailClosed, or what
	// Policy.DenyResponse chose).
	Status int
	// Body is the denial body (nil for none). It is shared: do not modify.
	Body []byte
	// DenialHeader holds the header fields of Policy.DenyResponse's Denial,
	// nil otherwise. The Write methods apply them after Fields, replacing
	// fields of the same name. Shared: do not modify.
	DenialHeader http.Header

	fields [maxFields]Field
	n      int
}

// Denied reports whether the adapter must send Status and Body instead of
// calling the next handler.
func (r Response) Denied() bool { return r.Status != 0 }

// Fields returns the engine's header lines, in order, before the merge rules
// of WriteHeadersTo and without DenialHeader. For inspection and tests.
func (r *Response) Fields() []Field { return r.fields[:r.n] }

func (r *Response) add(name, value string) {
	if r.n < maxFields {
		r.fields[r.n] = Field{name, value}
		r.n++
	}
}

// drop removes every field called name, keeping the order of the rest.
func (r *Response) drop(name string) {
	k := 0
	for _, f := range r.fields[:r.n] {
		if f.Name != name {
			r.fields[k] = f
			k++
		}
	}
	for i := k; i < r.n; i++ {
		r.fields[i] = Field{}
	}
	r.n = k
}

// HeaderWriter is write access to a response's header fields. http.Header
// implements it; adapters whose framework has another header type (fasthttp)
// wrap theirs. Get returns the first value of a field ("" when absent), Set
// replaces every value of a field, Add appends one. Names are given in Go's
// canonical form; implementations may treat them case-insensitively.
type HeaderWriter interface {
	Get(name string) string
	Set(name, value string)
	Add(name, value string)
}

var _ HeaderWriter = http.Header(nil)

// WriteHeaders applies the header fields to h; see WriteHeadersTo.
func (r *Response) WriteHeaders(h http.Header) { r.WriteHeadersTo(canonicalHeader(h)) }

// WriteHeadersTo applies the header fields to h, following the rules that
// let two limiters on one request (a global and a per-route mount) both
// speak, in mount order:
//   - RateLimit-Policy and RateLimit are Structured Field Lists
//     (draft-ietf-httpapi-ratelimit-headers-10): values are added, so both
//     policies appear as list members of the same fields;
//   - RateLimit-Limit/-Remaining/-Reset (Triplet) and X-RateLimit-Limit/
//     -Remaining/-Reset (Legacy) hold one value each: a limiter replaces the
//     three values already present only when it is closer to exhaustion
//     (lower Remaining, or equal Remaining and a later Reset), as the drafts
//     up to -06 ask ("the quota that is closer to reach its limit");
//   - Retry-After, Cache-Control and Content-Type are set;
//   - DenialHeader fields, if any, are set last.
//
// It allocates nothing when there are no fields (the default disclosure on
// an allowed request).
func (r *Response) WriteHeadersTo(h HeaderWriter) {
	fs := r.fields[:r.n]
	for i := 0; i < len(fs); i++ {
		f := fs[i]
		switch f.Name {
		case HeaderRateLimitLimit, HeaderXRateLimitLimit:
			if i+2 < len(fs) {
				rem, reset := fs[i+1], fs[i+2]
				if closerToExhaustion(h, rem, reset) {
					h.Set(f.Name, f.Value)
					h.Set(rem.Name, rem.Value)
					h.Set(reset.Name, reset.Value)
				}
				i += 2
				continue
			}
			h.Set(f.Name, f.Value)
		case HeaderRetryAfter, HeaderCacheControl, HeaderContentType:
			h.Set(f.Name, f.Value)
		case HeaderRateLimitPolicy:
			addPolicyMember(h, f.Value)
		default:
			h.Add(f.Name, f.Value)
		}
	}
	for name, vs := range r.DenialHeader {
		name = textproto.CanonicalMIMEHeaderKey(name)
		for i, v := range vs {
			if i == 0 {
				h.Set(name, v)
			} else {
				h.Add(name, v)
			}
		}
	}
}

// closerToExhaustion reports whether the Remaining/Reset pair rem, reset
// should replace the values h already holds for those fields: when h holds
// none (or values that are not integers), or rem is lower, or rem is equal
// and reset later.
// addPolicyMember adds one limiter's RateLimit-Policy member. One List cannot
// mix the -10 form (a quoted name: "100p60";q=100;w=60) with the -06 form (an
// integer: 100;w=60), so when two limiters with different header styles meet
// on one request the -10 form wins: a -10 member replaces -06 members already
// present, and a -06 member is dropped when -10 members are.
func addPolicyMember(h HeaderWriter, v string) {
	ietf := strings.HasPrefix(v, `"`)
	switch old := h.Get(HeaderRateLimitPolicy); {
	case old == "":
		h.Set(HeaderRateLimitPolicy, v)
	case ietf == strings.HasPrefix(old, `"`):
		h.Add(HeaderRateLimitPolicy, v)
	case ietf:
		h.Set(HeaderRateLimitPolicy, v)
	}
}

func closerToExhaustion(h HeaderWriter, rem, reset Field) bool {
	old, err := strconv.ParseInt(h.Get(rem.Name), 10, 64)
	if err != nil {
		return true
	}
	cur, _ := strconv.ParseInt(rem.Value, 10, 64)
	if cur != old {
		return cur < old
	}
	oldReset, err := strconv.ParseInt(h.Get(reset.Name), 10, 64)
	if err != nil {
		return true
	}
	curReset, _ := strconv.ParseInt(reset.Value, 10, 64)
	return curReset > oldReset
}

// WriteDenial writes the whole denial (header fields, Status, Body) to w. It
// is a no-op when the request is not Denied. net/http based adapters call it.
func (r *Response) WriteDenial(w http.ResponseWriter) {
	if !r.Denied() {
		return
	}
	h := w.Header()
	r.WriteHeadersTo(h)
	h.Set("Content-Length", strconv.Itoa(len(r.Body)))
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

// RetryAfterSeconds converts a Decision's RetryAfter into an RFC 9110
// (10.2.3) Retry-After delay-seconds value: whole seconds rounded up, never
// below 1, so that a client that obeys it is never early (9.5 s -> 10,
// 0.3 s -> 1, 0 -> 1).
func RetryAfterSeconds(d Decision) int64 {
	return max(ceilDiv(d.RetryAfter.Milliseconds(), 1000), 1)
}

// respond fills the header fields, status and body of resp from its Decision
// and the policy's Disclosure and HeaderStyle:
//
//	            allowed           denied (429, or FailClosed 503)
//	None        -                 Cache-Control
//	RetryAfter  -                 + Retry-After, Content-Type, problem body
//	OnLimit     -                 + RateLimit fields (429 only)
//	Always      RateLimit fields  as OnLimit
//
// RateLimit fields are sent only when a store produced the numbers: never
// under FailOpen (nothing is known) nor on FailClosed's 503.
func (l *Limiter) respond(resp *Response) {
	d := &resp.Decision
	level := l.policy.Disclosure.level()
	if d.Allowed {
		if level >= 3 && d.numbers {
			ms := d.ResetAfter.Milliseconds()
			l.rateLimitFields(resp, ceilDiv(ms, 1000), ms)
		}
		return
	}
	resp.Status, resp.Body = http.StatusTooManyRequests, l.body429
	if !d.numbers { // FailClosed: no store decided
		resp.Status, resp.Body = http.StatusServiceUnavailable, body503
	}
	retry := RetryAfterSeconds(*d)
	if level >= 2 && d.numbers {
		l.rateLimitFields(resp, retry, d.RetryAfter.Milliseconds())
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
// delta seconds until quota frees (on a denial the Retry-After value, so that
// Retry-After is never earlier than t); deltaMS is the exact delay t was
// rounded up from, which the Legacy epoch form adds to the store's clock.
func (l *Limiter) rateLimitFields(resp *Response, t, deltaMS int64) {
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
		// With IETF selected too, RateLimit-Policy carries the -10 form
		// only: one List field cannot mix -10 members (strings) with -06
		// members (integers). Triplet clients read the other three fields.
		if style&HeadersIETF == 0 {
			tr := l.headers.triplet
			if d.Limit != l.res.limit {
				tr = limit + ";w=" + strconv.FormatInt(l.headers.windowS, 10)
			}
			resp.add(HeaderRateLimitPolicy, tr)
		}
		resp.add(HeaderRateLimitLimit, limit)
		resp.add(HeaderRateLimitRemaining, strconv.FormatInt(d.Remaining, 10))
		resp.add(HeaderRateLimitReset, strconv.FormatInt(t, 10))
	}
	if style&HeadersLegacy != 0 {
		resp.add(HeaderXRateLimitLimit, limit)
		resp.add(HeaderXRateLimitRemain, strconv.FormatInt(d.Remaining, 10))
		// Unix epoch seconds of the instant the delay ends, rounded up: the
		// store's clock reading plus the exact delay.
		nowMS := d.ResetAt.UnixMilli() - d.ResetAfter.Milliseconds()
		resp.add(HeaderXRateLimitReset, strconv.FormatInt(ceilDiv(nowMS+deltaMS, 1000), 10))
	}
}

// canonicalHeader writes to an http.Header without canonicalising names: the
// engine's field names are canonical constants already (DenialHeader names are
// canonicalised by applyFields), which saves a CanonicalMIMEHeaderKey per
// field on every response.
type canonicalHeader http.Header

func (h canonicalHeader) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (h canonicalHeader) Set(name, value string) { h[name] = []string{value} }
func (h canonicalHeader) Add(name, value string) { h[name] = append(h[name], value) }
