package limit

import (
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// This file writes a response (response.go) into a framework's response:
// through the ResponseWriter an adapter implements, or straight into a
// net/http http.ResponseWriter. Both follow the same merge rules, so that
// every adapter sends the same bytes.

// ResponseWriter is the engine's access to one framework's response: the
// part of an adapter that is specific to its framework on the way out (see
// Limiter.Check). The engine implements it for net/http itself
// (Limiter.CheckHTTP); the fiber adapter implements it over fasthttp.
//
// Names are given in Go's canonical form ("Ratelimit-Policy");
// implementations may treat them case-insensitively. Get, Set and Add need
// not be safe for concurrent use: the engine calls them from the request's
// goroutine only.
//
// A ResponseWriter may also carry a flag of the request that every mount on
// it sees, with the methods
//
//	SetLimited()   // a mount limited the request
//	Limited() bool // whether one did
//
// (fiber's keeps it in c.Locals). Check sets it when it limits the request,
// and Limiter.Finish reads it for the mounts that charged the request
// earlier, which then give their charges back: a request limited by any
// mount charges none. Without them each mount keeps its own charge.
// (CheckHTTP keeps the flag in the request's header map itself.)
type ResponseWriter interface {
	// Get returns the first value of a header field, "" when absent.
	Get(name string) string
	// Set replaces every value of a header field.
	Set(name, value string)
	// Add appends a value to a header field.
	Add(name, value string)
	// Send writes the status and body of a limited request; nil body: none,
	// and then no Content-Type either (a framework that adds a default one
	// must not). It is called at most once per request, after every header
	// field, and the adapter then stops the chain. body is shared: it must
	// be copied if the framework keeps it past the call.
	Send(status int, body []byte)
}

// headerWriter is the part of ResponseWriter that writes header fields.
type headerWriter interface {
	Get(name string) string
	Set(name, value string)
	Add(name, value string)
}

var _ headerWriter = http.Header(nil)

// writeTo writes r into w: the header fields, and for a limited request the
// status and body.
func (r *response) writeTo(w ResponseWriter) {
	r.writeFields(w)
	if r.status != 0 {
		w.Send(r.status, r.body)
	}
}

// writeHTTP writes r into a net/http response. It allocates nothing when
// there is nothing to write (an allowed request at the default disclosure).
func (r *response) writeHTTP(w http.ResponseWriter) {
	if r.n == 0 && r.status == 0 {
		return
	}
	h := w.Header()
	r.writeFields(canonicalHeader(h))
	if r.status == 0 {
		return
	}
	h.Set(hContentLength, strconv.Itoa(len(r.body)))
	w.WriteHeader(r.status)
	if len(r.body) > 0 {
		_, _ = w.Write(r.body)
	}
}

// writeFields applies the header fields to h, following the rules that let
// two limiters on one request (a global and a per-route mount) both speak,
// in mount order:
//   - RateLimit-Policy and RateLimit are Structured Field Lists
//     (draft-ietf-httpapi-ratelimit-headers-10): values are added, so both
//     policies appear as list members of the same fields;
//   - RateLimit-Limit/-Remaining/-Reset (Triplet) and X-RateLimit-Limit/
//     -Remaining/-Reset (Legacy) hold one value each: a limiter replaces the
//     three values already present only when it is closer to exhaustion
//     (lower Remaining, or equal Remaining and a later Reset), as the drafts
//     up to -06 ask ("the quota that is closer to reach its limit");
//   - Retry-After, Cache-Control and Content-Type are set;
//   - LimitedResponse.Header fields, if any, are set last.
func (r *response) writeFields(h headerWriter) {
	fs := r.fields[:r.n]
	for i := 0; i < len(fs); i++ {
		f := fs[i]
		switch f.name {
		case hRateLimitLimit, hXRateLimitLimit:
			if i+2 < len(fs) {
				rem, reset := fs[i+1], fs[i+2]
				if closerToExhaustion(h, rem, reset) {
					h.Set(f.name, f.value)
					h.Set(rem.name, rem.value)
					h.Set(reset.name, reset.value)
				}
				i += 2
				continue
			}
			h.Set(f.name, f.value)
		case hRetryAfter, hCacheControl, hContentType:
			h.Set(f.name, f.value)
		case hRateLimitPolicy:
			addPolicyMember(h, f.value)
		default:
			h.Add(f.name, f.value)
		}
	}
	for name, vs := range r.header {
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

// addPolicyMember adds one limiter's RateLimit-Policy member. One List cannot
// mix the -10 form (a quoted name: "100p60";q=100;w=60) with the -06 form (an
// integer: 100;w=60), so when two limiters with different header styles meet
// on one request the -10 form wins: a -10 member replaces -06 members already
// present, and a -06 member is dropped when -10 members are.
func addPolicyMember(h headerWriter, v string) {
	ietf := strings.HasPrefix(v, `"`)
	switch old := h.Get(hRateLimitPolicy); {
	case old == "":
		h.Set(hRateLimitPolicy, v)
	case ietf == strings.HasPrefix(old, `"`):
		h.Add(hRateLimitPolicy, v)
	case ietf:
		h.Set(hRateLimitPolicy, v)
	}
}

// closerToExhaustion reports whether the Remaining/Reset pair rem, reset
// should replace the values h already holds for those fields: when h holds
// none (or values that are not integers), or rem is lower, or rem is equal
// and reset later.
func closerToExhaustion(h headerWriter, rem, reset field) bool {
	// An absent field is answered before ParseInt, whose error allocates:
	// the first (often the only) mount on a request writes for free.
	oldText := h.Get(rem.name)
	if oldText == "" {
		return true
	}
	old, err := strconv.ParseInt(oldText, 10, 64)
	if err != nil {
		return true
	}
	cur, _ := strconv.ParseInt(rem.value, 10, 64)
	if cur != old {
		return cur < old
	}
	oldReset, err := strconv.ParseInt(h.Get(reset.name), 10, 64)
	if err != nil {
		return true
	}
	curReset, _ := strconv.ParseInt(reset.value, 10, 64)
	return curReset > oldReset
}

// canonicalHeader writes to an http.Header without canonicalising names: the
// engine's field names are canonical constants already (LimitedResponse
// names are canonicalised by writeFields), which saves a
// CanonicalMIMEHeaderKey per field on every response.
type canonicalHeader http.Header

func (h canonicalHeader) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (h canonicalHeader) Set(name, value string) { h[name] = []string{value} }
func (h canonicalHeader) Add(name, value string) { h[name] = append(h[name], value) }
