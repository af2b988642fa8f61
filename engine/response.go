package limit

import (
	"github.com/quotagate/quotagate/engine/limitstore"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file decides what a client is told: the header fields of an allowed
// request, and the status, header fields and body of a limited one, from the
// Decision and the policy's Disclosure and HeaderStyle. write.go writes the
// result into a framework's response.

// Disclosure decides what a client is told about its limit. Each level
// includes the one before: None < RetryAfter < OnLimit < Always. The zero
// value is DiscloseRetryAfter. Disclosure never changes enforcement or metrics.
type Disclosure uint8

const (
	// DiscloseRetryAfter (the default): a limited response carries
	// Retry-After and the RFC 9457 problem body; allowed responses carry
	// nothing.
	DiscloseRetryAfter Disclosure = iota
	// DiscloseNone: a limited response is a bare status with no body and no
	// rate-limit headers (only Cache-Control: no-store).
	DiscloseNone
	// DiscloseOnLimit: as RetryAfter, plus the RateLimit headers on limited
	// responses.
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

// LimitedResponse is what Policy.LimitedResponse returns: the response to a
// limited request in place of the default RFC 9457 problem body.
//
// The engine keeps the fields it owns: Retry-After and the RateLimit fields,
// as the policy's Disclosure and HeaderStyle say, and Cache-Control:
// no-store. Header fields are applied after them and replace engine fields
// of the same name (they are set, not added). The default Content-Type goes
// with the default body: set one in Header when Body needs it.
type LimitedResponse struct {
	// Status is the status code, 400-599; 0 keeps the default (429, or 503
	// when FailClosed rejected on a store failure).
	Status int
	// Header holds extra header fields; nil for none. It is read, never
	// modified, and may be shared between calls.
	Header http.Header
	// Body is the response body; nil for none. It may be shared between
	// calls and must not be modified afterwards.
	Body []byte
}

// Header field names, in Go's canonical form so that http.Header lookups
// find them (HTTP field names are case-insensitive on the wire).
const (
	hRetryAfter          = "Retry-After"
	hCacheControl        = "Cache-Control"
	hContentType         = "Content-Type"
	hContentLength       = "Content-Length"
	hRateLimitPolicy     = "Ratelimit-Policy"
	hRateLimit           = "Ratelimit"
	hRateLimitLimit      = "Ratelimit-Limit"
	hRateLimitRemaining  = "Ratelimit-Remaining"
	hRateLimitReset      = "Ratelimit-Reset"
	hXRateLimitLimit     = "X-Ratelimit-Limit"
	hXRateLimitRemaining = "X-Ratelimit-Remaining"
	hXRateLimitReset     = "X-Ratelimit-Reset"
)

// problemJSON is the RFC 9457 media type of the default limited body.
const problemJSON = "application/problem+json"

// The 503 body of FailClosed (RFC 9457). Like the 429 body built by
// problemBody it restates neither the limit nor the delay and never carries
// an error string or the client's identity.
var body503 = problemBody("", "", http.StatusServiceUnavailable)

// problemTypeCostExceedsQuota is the RFC 9457 problem type of a request whose
// cost exceeds the quota's capacity, so that no wait would admit it (see
// Decision.OverCapacity); the document it names describes the problem.
const problemTypeCostExceedsQuota = "https://github.com/quotagate/quotagate/blob/main/docs/response-contract.md#cost-exceeds-quota"

// bodyOverCapacity is the 429 body of such a request: its own type and
// title, and, like the other bodies, neither the limit nor the cost.
var bodyOverCapacity = problemBody(problemTypeCostExceedsQuota, "Request cost exceeds the quota", http.StatusTooManyRequests)

// problemBody renders an RFC 9457 problem body with members type, title
// ("": the status phrase, as about:blank asks) and status. typ has passed
// checkURIReference (or is "", which means "about:blank") and title is
// plain ASCII without quotes, so neither needs JSON escaping.
func problemBody(typ, title string, status int) []byte {
	if typ == "" {
		typ = "about:blank"
	}
	if title == "" {
		title = http.StatusText(status)
	}
	b := append([]byte(`{"type":"`), typ...)
	b = append(b, `","title":"`...)
	b = append(b, title...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	return append(b, '}')
}

// field is one response header line. Its value is value itself, or for the
// numbers of the Decision (kind other than valConst) rendered when the
// response is written, so that every number of a response shares one string
// (write.go). The name is an index (fieldNames), which keeps the field at 24
// bytes: a response is cleared on every request.
type field struct {
	value string // the value; for valItem the quota's member prefix
	name  fieldName
	kind  valueKind
}

// fieldName is a header field name of the engine's: fieldNames[n].
type fieldName uint8

const (
	nRetryAfter fieldName = iota
	nCacheControl
	nContentType
	nRateLimitPolicy
	nRateLimit
	nRateLimitLimit
	nRateLimitRemaining
	nRateLimitReset
	nXRateLimitLimit
	nXRateLimitRemaining
	nXRateLimitReset
)

// fieldNames spells each fieldName.
var fieldNames = [...]string{
	nRetryAfter:          hRetryAfter,
	nCacheControl:        hCacheControl,
	nContentType:         hContentType,
	nRateLimitPolicy:     hRateLimitPolicy,
	nRateLimit:           hRateLimit,
	nRateLimitLimit:      hRateLimitLimit,
	nRateLimitRemaining:  hRateLimitRemaining,
	nRateLimitReset:      hRateLimitReset,
	nXRateLimitLimit:     hXRateLimitLimit,
	nXRateLimitRemaining: hXRateLimitRemaining,
	nXRateLimitReset:     hXRateLimitReset,
}

// header is the field's name.
func (f *field) header() string { return fieldNames[f.name] }

// valueKind says where the value of a field comes from.
type valueKind uint8

const (
	valConst     valueKind = iota // field.value
	valRemaining                  // response.remaining in decimal
	valReset                      // response.reset: delta seconds
	valEpoch                      // response.epoch: Unix epoch seconds
	valRetry                      // response.retry: Retry-After's delay-seconds
	valItem                       // field.value + remaining + ";t=" + reset: a RateLimit member
)

// maxFields bounds the header lines of one response: IETF (2), Triplet (4),
// Legacy (3), Retry-After, Cache-Control and Content-Type.
const maxFields = 12

// response is what the engine writes for one request: the Decision, its
// header fields and, when the request is limited, the status and body.
// Check builds it in place on the caller's stack (no allocation).
type response struct {
	Decision Decision
	// set is the quotaSet that decided (its rendered header parts); nil
	// for a skipped request.
	set *quotaSet
	// status is 0 when the request proceeds, else the status to send (429
	// Too Many Requests per RFC 6585, 503 under FailClosed, or what
	// Policy.LimitedResponse chose).
	status int
	// body is the limited response's body (nil for none); shared, read-only.
	body []byte
	// header holds LimitedResponse.Header, applied after fields; shared,
	// read-only.
	header http.Header
	fields [maxFields]field
	n      int
	// The numbers that fields of a kind other than valConst render.
	remaining, reset, epoch, retry int64
}

// add adds a field whose value is value.
func (r *response) add(name fieldName, value string) { r.addKind(name, value, valConst) }

// addKind adds a field whose value kind says how to render from value and
// the response's numbers.
func (r *response) addKind(name fieldName, value string, kind valueKind) {
	if r.n < maxFields {
		r.fields[r.n] = field{value, name, kind}
		r.n++
	}
}

// number is the number a field of kind k renders (not valConst or valItem).
func (r *response) number(k valueKind) int64 {
	switch k {
	case valRemaining:
		return r.remaining
	case valReset:
		return r.reset
	case valEpoch:
		return r.epoch
	}
	return r.retry
}

// drop removes every field called name, keeping the order of the rest.
func (r *response) drop(name fieldName) {
	k := 0
	for _, f := range r.fields[:r.n] {
		if f.name != name {
			r.fields[k] = f
			k++
		}
	}
	for i := k; i < r.n; i++ {
		r.fields[i] = field{}
	}
	r.n = k
}

// replace puts a LimitedResponse in place of the default limited response.
func (r *response) replace(lr *LimitedResponse) {
	if lr.Status != 0 {
		r.status = lr.Status
	}
	r.body = lr.Body
	r.header = lr.Header
	r.drop(nContentType)
}

// responder builds a limiter's responses; its constant parts are rendered
// once, by New (the per-quota parts in each quotaSet's setHeaders).
type responder struct {
	level   int // Disclosure.level()
	style   HeaderStyle
	shadow  bool   // Policy.Shadow: no header field, ever
	body429 []byte // the default 429 problem body, with ProblemType
}

func newResponder(p *Policy) responder {
	r := responder{level: p.Disclosure.level(), style: p.HeaderStyle, shadow: p.Shadow,
		body429: problemBody(p.ProblemType, "", http.StatusTooManyRequests)}
	if r.style == 0 {
		r.style = HeadersIETF
	}
	return r
}

// setHeaders is the rendered header parts of one quotaSet.
type setHeaders struct {
	member     [limitstore.MaxQuotas]string // each quota's RateLimit member up to r's value: "100p60";r=
	limitText  [limitstore.MaxQuotas]string // each quota's Limit in decimal
	ietfPolicy string                       // every quota: "2p10";q=2;w=10, "5p60";q=5;w=60
	triplet    string                       // every quota, the -06 form: 2;w=10, 5;w=60
	cal        *calendarHeaders             // with calendar quotas, the two above per period (calendar.go); nil: none
}

// newSetHeaders renders the header parts of set, whose quota names come
// from named (the plan's quotas: the fallback bucket's tightened copy keeps
// their names). A quota's name is the policy Name, or with several quotas
// Name + "/" + the quota's signature; without a Name, the quota's
// signature ("100p60": the default bucket name of a one-quota policy).
func newSetHeaders(p *Policy, named, set *quotaSet) setHeaders {
	var h setHeaders
	var ietf, triplet, quotedNames, ws []string
	for i := range set.n {
		nq, q := &named.q[i], &set.q[i]
		name := nq.signature(p.Algorithm)
		switch {
		case p.Name != "" && set.n == 1:
			name = p.Name
		case p.Name != "":
			name = p.Name + "/" + name
		}
		quoted := quoteSF(name)
		h.member[i] = quoted + ";r="
		h.limitText[i] = strconv.FormatInt(q.limit, 10)
		w := strconv.FormatInt(ceilDiv(q.windowMS, 1000), 10)
		ietf = append(ietf, quoted+";q="+h.limitText[i]+";w="+w)
		triplet = append(triplet, h.limitText[i]+";w="+w)
		quotedNames, ws = append(quotedNames, quoted), append(ws, w)
	}
	h.ietfPolicy, h.triplet = strings.Join(ietf, ", "), strings.Join(triplet, ", ")
	h.cal = newCalendarHeaders(set, quotedNames, h.limitText[:set.n], ws)
	return h
}

// fill sets the header fields, status and body of resp from its Decision:
//
//	            allowed           limited (429, or FailClosed 503)
//	None        -                 Cache-Control
//	RetryAfter  -                 + Retry-After, Content-Type, problem body
//	OnLimit     -                 + RateLimit fields (429 only)
//	Always      RateLimit fields  as OnLimit
//
// RateLimit fields are sent only when a store produced the numbers: never
// under FailOpen (nothing is known) nor on FailClosed's 503. A cost above
// the quota's capacity (Decision.OverCapacity) gets 429 with its own
// problem body, Content-Type and Cache-Control only: no Retry-After.
func (r *responder) fill(resp *response) {
	d := &resp.Decision
	if r.shadow {
		return // never limits, tells clients nothing
	}
	if d.Allowed {
		if r.level >= 3 && d.numbers {
			ms := d.ResetAfter.Milliseconds()
			r.rateLimitFields(resp, ceilDiv(ms, 1000), ms)
		}
		return
	}
	resp.status, resp.body = http.StatusTooManyRequests, r.body429
	if d.OverCapacity {
		// No wait admits it: no Retry-After and no RateLimit fields (no
		// store was asked, and a t would promise success).
		resp.body = bodyOverCapacity
		if r.level >= 1 {
			resp.add(nContentType, problemJSON)
		} else {
			resp.body = nil
		}
		resp.add(nCacheControl, "no-store")
		return
	}
	if !d.numbers && !d.busy { // FailClosed: no store decided
		resp.status, resp.body = http.StatusServiceUnavailable, body503
	}
	retry := retryAfterSeconds(d.RetryAfter)
	if r.level >= 2 && d.numbers {
		r.rateLimitFields(resp, retry, d.RetryAfter.Milliseconds())
	}
	if r.level >= 1 {
		resp.retry = retry
		resp.addKind(nRetryAfter, "", valRetry)
		resp.add(nContentType, problemJSON)
	} else {
		resp.body = nil
	}
	resp.add(nCacheControl, "no-store")
}

// rateLimitFields adds the RateLimit fields of every selected style. t is the
// delta seconds until quota frees (on a limited response the Retry-After
// value, so that Retry-After is never earlier than t); deltaMS is the exact
// delay t was rounded up from, which the Legacy epoch form adds to the
// store's clock. The fields' numbers are rendered when the response is
// written (write.go): here they are only recorded.
func (r *responder) rateLimitFields(resp *response, t, deltaMS int64) {
	d := &resp.Decision
	if resp.set == nil || d.quota >= resp.set.n {
		return
	}
	h := &resp.set.hdr
	resp.remaining, resp.reset = d.Remaining, t
	limit := h.limitText[d.quota]
	ietfPolicy, triplet := h.policy(&d.charge.windows)
	if r.style&HeadersIETF != 0 {
		resp.add(nRateLimitPolicy, ietfPolicy)
		resp.addKind(nRateLimit, h.member[d.quota], valItem)
	}
	if r.style&HeadersTriplet != 0 {
		// With IETF selected too, RateLimit-Policy carries the -10 form
		// only: one List field cannot mix -10 members (strings) with -06
		// members (integers). Triplet clients read the other three fields.
		if r.style&HeadersIETF == 0 {
			resp.add(nRateLimitPolicy, triplet)
		}
		resp.add(nRateLimitLimit, limit)
		resp.addKind(nRateLimitRemaining, "", valRemaining)
		resp.addKind(nRateLimitReset, "", valReset)
	}
	if r.style&HeadersLegacy != 0 {
		resp.add(nXRateLimitLimit, limit)
		resp.addKind(nXRateLimitRemaining, "", valRemaining)
		// Unix epoch seconds of the instant the delay ends, rounded up: the
		// store's clock reading plus the exact delay.
		nowMS := d.ResetAt.UnixMilli() - d.ResetAfter.Milliseconds()
		resp.epoch = ceilDiv(nowMS+deltaMS, 1000)
		resp.addKind(nXRateLimitReset, "", valEpoch)
	}
}

// RetryAfterSeconds is the Retry-After value the engine sends for a limited
// Decision, for callers that tell their clients themselves (Consume behind
// gRPC or a queue): RFC 9110 (10.2.3) delay-seconds, d.RetryAfter in whole
// seconds rounded up and never below 1, so that a client that obeys it is
// never early (9.5 s -> 10, 0.3 s -> 1, 0 -> 1). It is 0 when d is
// OverCapacity: no wait admits that cost, so send no Retry-After.
func RetryAfterSeconds(d Decision) int64 {
	if d.OverCapacity {
		return 0
	}
	return retryAfterSeconds(d.RetryAfter)
}

func retryAfterSeconds(d time.Duration) int64 {
	return max(ceilDiv(d.Milliseconds(), 1000), 1)
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
