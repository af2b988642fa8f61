package limit

import (
	"math/bits"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"unsafe"
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
// status and body. The numbers of the response share one allocation (none
// when every one is below 100).
func (r *response) writeTo(w ResponseWriter) {
	var t text
	if n := r.textLen(); n > 0 {
		t.buf = make([]byte, n)
	}
	r.writeFields(&fieldSink{w: w}, &t)
	if r.status != 0 {
		w.Send(r.status, r.body)
	}
}

// writeHTTP writes r into a net/http response. It allocates nothing when
// there is nothing to write (an allowed request at the default disclosure),
// and otherwise, for the fields of one mount, one object (newBlock): the
// value slices of the fields it adds and the text of their numbers.
func (r *response) writeHTTP(w http.ResponseWriter) {
	if r.n == 0 && r.status == 0 {
		return
	}
	h := w.Header()
	if r.status == 0 && r.n == 2 && r.fields[1].kind == valItem && len(h) == 0 && r.writeIETF(h) {
		return
	}
	size, slots := r.textLen(), r.n+len(r.header)
	if r.status != 0 {
		slots++
		if n := int64(len(r.body)); n >= smallInts {
			size += decimalLen(n)
		}
	}
	sink := fieldSink{h: h, empty: len(h) == 0}
	var t text
	sink.vals, t.buf = newBlock(slots, size)
	r.writeFields(&sink, &t)
	if r.status == 0 {
		return
	}
	sink.Set(hContentLength, t.number(int64(len(r.body))))
	w.WriteHeader(r.status)
	if len(r.body) > 0 {
		_, _ = w.Write(r.body)
	}
}

// writeIETF writes the fields of the commonest response that carries any,
// an allowed request of a policy with the IETF style alone, into h, which
// holds no field yet (the limiter is the first to write): RateLimit-Policy
// and RateLimit (fields[0] and fields[1], the member's numbers rendered),
// what writeFields would write, without its merge rules, which an empty map
// needs none of. Both values and their slots are one block of newBlock (64
// or 80 bytes for the usual member). It reports false, writing nothing,
// when the member is too long for one block.
func (r *response) writeIETF(h http.Header) bool {
	member := r.fields[1].value
	lr, lt := decimalLen(r.remaining), decimalLen(r.reset)
	size := len(member) + lr + len(";t=") + lt
	if size > len(block2x64{}.text) {
		return false
	}
	slots, text := newBlock(2, size)
	// Rendered in place: text has room for size bytes, and each byte is
	// written before the string holding it exists.
	n := copy(text, member)
	putDecimal(text[n:n+lr], r.remaining)
	n += lr
	n += copy(text[n:], ";t=")
	putDecimal(text[n:n+lt], r.reset)
	slots[0], slots[1] = r.fields[0].value, unsafe.String(&text[0], size)
	h[hRateLimitPolicy] = slots[0:1:1]
	h[hRateLimit] = slots[1:2:2]
	return true
}

// smallInts bounds the numbers that strconv renders without allocating (it
// returns constant strings for 0-99): they take no text.
const smallInts = 100

// text renders the numbers of one response's fields into buf, whose size
// the response's textLen gave, and returns each value as a string of buf's
// bytes: buf is this response's own and each byte is written once, before
// the string that holds it exists, so the strings never change. (Were buf
// too small, room would move on to a larger copy; the strings cut from the
// old one keep it.) buf is not re-sliced and n is an int, so that rendering
// writes no pointer (no write barrier while the GC runs).
type text struct {
	buf []byte
	n   int // the bytes of buf rendered
}

// value returns the value of f, rendering its numbers from r.
func (t *text) value(r *response, f *field) string {
	switch f.kind {
	case valConst:
		return f.value
	case valItem:
		start := t.n
		t.appendString(f.value)
		t.appendInt(r.remaining)
		t.appendString(";t=")
		t.appendInt(r.reset)
		return t.cut(start)
	}
	return t.number(r.number(f.kind))
}

// number returns n in decimal.
func (t *text) number(n int64) string {
	if 0 <= n && n < smallInts {
		return strconv.FormatInt(n, 10) // a constant: no allocation
	}
	start := t.n
	t.appendInt(n)
	return t.cut(start)
}

// room makes sure that buf has size bytes after n: when it has not, buf
// moves on to a larger copy (a value being rendered keeps its start).
func (t *text) room(size int) {
	if len(t.buf)-t.n < size {
		b := make([]byte, max(2*len(t.buf), t.n+size))
		copy(b, t.buf[:t.n])
		t.buf = b
	}
}

func (t *text) appendString(s string) {
	t.room(len(s))
	t.n += copy(t.buf[t.n:], s)
}

// appendInt appends n in decimal, in place (room makes the space first, so
// strconv never moves the buffer under the strings already cut from it).
func (t *text) appendInt(n int64) {
	size := decimalLen(n)
	t.room(size)
	putDecimal(t.buf[t.n:t.n+size], n)
	t.n += size
}

// putDecimal writes n in decimal into b, whose length is decimalLen(n): in
// place, four digits per 64-bit division (two pairs from one 32-bit
// remainder), without strconv's buffer and copy.
func putDecimal(b []byte, n int64) {
	if n < 0 {
		strconv.AppendInt(b[:0], n, 10) // cap(b) >= its length: in place
		return
	}
	u, i := uint64(n), len(b)
	for u >= 10000 {
		q := u / 10000
		r := uint32(u - q*10000)
		hi, lo := r/100*2, r%100*2
		i -= 4
		b[i], b[i+1], b[i+2], b[i+3] = digitPairs[hi], digitPairs[hi+1], digitPairs[lo], digitPairs[lo+1]
		u = q
	}
	v := uint32(u) // below 10000
	if v >= 100 {
		r := v % 100 * 2
		v /= 100
		i -= 2
		b[i], b[i+1] = digitPairs[r], digitPairs[r+1]
	}
	if v >= 10 {
		b[i-2], b[i-1] = digitPairs[v*2], digitPairs[v*2+1]
		return
	}
	b[i-1] = byte('0' + v)
}

// digitPairs holds 00 to 99, two bytes each.
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// cut returns the bytes rendered since start as a string.
func (t *text) cut(start int) string {
	if start == t.n {
		return ""
	}
	return unsafe.String(&t.buf[start], t.n-start)
}

// textLen is how many bytes of text r's field values render: what text
// needs.
func (r *response) textLen() int {
	size := 0
	for i := range r.fields[:r.n] {
		switch f := &r.fields[i]; f.kind {
		case valConst:
		case valItem:
			size += len(f.value) + decimalLen(r.remaining) + len(";t=") + decimalLen(r.reset)
		default:
			if n := r.number(f.kind); n < 0 || n >= smallInts {
				size += decimalLen(n)
			}
		}
	}
	return size
}

// decimalLen is the length of n in decimal.
func decimalLen(n int64) int {
	u, sign := uint64(n), 0
	if n < 0 {
		u, sign = -u, 1
	}
	// log10 from log2 (1233/4096 ~ log10(2)), then one comparison; 0 is
	// counted as 1 (and as pow10 is even past 1, u|1 compares as u).
	u |= 1
	l := bits.Len64(u) * 1233 >> 12
	if u >= pow10[l] {
		l++
	}
	return sign + l
}

// pow10[i] is 10 to the power i.
var pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// The blocks of newBlock: value slots and text in one object, each in a
// size class of its own (64 to 448 bytes), so that the object is about as
// small as the fields of the response: IETF alone on an allowed response
// has 2 fields and 20 to 40 bytes of text, the default limited response 4
// fields and none, every style on a limited one 13 fields.
type (
	block2x32 struct {
		vals [2]string
		text [32]byte
	}
	block2x48 struct {
		vals [2]string
		text [48]byte
	}
	block2x64 struct {
		vals [2]string
		text [64]byte
	}
	block4x16 struct {
		vals [4]string
		text [16]byte
	}
	block4x64 struct {
		vals [4]string
		text [64]byte
	}
	block8x80 struct {
		vals [8]string
		text [80]byte
	}
	block16x96 struct {
		vals [16]string
		text [96]byte
	}
	block16x192 struct {
		vals [16]string
		text [192]byte
	}
)

// newBlock allocates the value slots of n header fields and a text buffer
// of at least size bytes, in one object when they fit one of the
// blocks and in two when they do not. Each slot becomes one field's 1-value
// slice (fieldSink.slot), so that net/http's header map gets its []string
// values without an allocation each, and the numbers' strings (text) point
// into the same object.
func newBlock(n, size int) (slots []string, text []byte) {
	switch {
	case n <= 2 && size <= 32:
		b := new(block2x32)
		return b.vals[:n], b.text[:]
	case n <= 2 && size <= 48:
		b := new(block2x48)
		return b.vals[:n], b.text[:]
	case n <= 2 && size <= 64:
		b := new(block2x64)
		return b.vals[:n], b.text[:]
	case n <= 4 && size <= 16:
		b := new(block4x16)
		return b.vals[:n], b.text[:]
	case n <= 4 && size <= 64:
		b := new(block4x64)
		return b.vals[:n], b.text[:]
	case n <= 8 && size <= 80:
		b := new(block8x80)
		return b.vals[:n], b.text[:]
	case n <= 16 && size <= 96:
		b := new(block16x96)
		return b.vals[:n], b.text[:]
	case n <= 16 && size <= 192:
		b := new(block16x192)
		return b.vals[:n], b.text[:]
	}
	if size > 0 {
		text = make([]byte, size)
	}
	return make([]string, n), text
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
//     up to -06 ask ("the quota that is closer to reach its limit"), and
//     always on the response it limits, which is its own: they then agree
//     with its Retry-After (an earlier mount's charge is given back, so its
//     numbers would be stale);
//   - Retry-After, Cache-Control and Content-Type are set;
//   - LimitedResponse.Header fields, if any, are set last.
//
// t renders the values' numbers.
func (r *response) writeFields(h *fieldSink, t *text) {
	fs := r.fields[:r.n]
	for i := 0; i < len(fs); i++ {
		f := &fs[i]
		switch f.name {
		case nRateLimitLimit, nXRateLimitLimit:
			if i+2 < len(fs) {
				rem, reset := &fs[i+1], &fs[i+2]
				if r.status != 0 || closerToExhaustion(h, rem.header(), reset.header(), r.number(rem.kind), r.number(reset.kind)) {
					h.Set(f.header(), t.value(r, f))
					h.Set(rem.header(), t.value(r, rem))
					h.Set(reset.header(), t.value(r, reset))
				}
				i += 2
				continue
			}
			h.Set(f.header(), t.value(r, f))
		case nRetryAfter, nCacheControl, nContentType:
			h.Set(f.header(), t.value(r, f))
		case nRateLimitPolicy:
			addPolicyMember(h, t.value(r, f))
		default:
			h.Add(f.header(), t.value(r, f))
		}
	}
	h.empty = false // LimitedResponse.Header may name the fields just written
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
func addPolicyMember(h *fieldSink, v string) {
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

// closerToExhaustion reports whether the Remaining/Reset pair cur, curReset
// should replace the values h already holds for the fields remName and
// resetName: when h holds none (or values that are not integers), or cur is
// lower, or cur is equal and curReset later.
func closerToExhaustion(h *fieldSink, remName, resetName string, cur, curReset int64) bool {
	// An absent field is answered before ParseInt, whose error allocates:
	// the first (often the only) mount on a request writes for free.
	oldText := h.Get(remName)
	if oldText == "" {
		return true
	}
	old, err := strconv.ParseInt(oldText, 10, 64)
	if err != nil {
		return true
	}
	if cur != old {
		return cur < old
	}
	oldReset, err := strconv.ParseInt(h.Get(resetName), 10, 64)
	if err != nil {
		return true
	}
	return curReset > oldReset
}

// fieldSink is where writeFields writes: an adapter's ResponseWriter (w),
// or else a net/http header map (h), whose names it does not canonicalise:
// the engine's field names are canonical constants already
// (LimitedResponse names are canonicalised by writeFields), which saves a
// CanonicalMIMEHeaderKey per field on every response.
type fieldSink struct {
	w headerWriter
	h http.Header
	// vals are the value slots of h's fields (newBlock), used up to next:
	// a field that h lacks gets the 1-value slice of the next one.
	vals []string
	next int
	// empty reports that h held no field when writeFields began: as the
	// engine's fields have distinct names, none of them is there to read
	// or to add to, and the map lookups are saved (the limiter is often
	// the first to write into a response).
	empty bool
}

func (s *fieldSink) Get(name string) string {
	if s.w != nil {
		return s.w.Get(name)
	}
	if s.empty {
		return ""
	}
	if v := s.h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *fieldSink) Set(name, value string) {
	if s.w != nil {
		s.w.Set(name, value)
		return
	}
	s.h[name] = s.slot(value)
}

func (s *fieldSink) Add(name, value string) {
	if s.w != nil {
		s.w.Add(name, value)
		return
	}
	if !s.empty {
		if old := s.h[name]; len(old) > 0 {
			s.h[name] = append(old, value)
			return
		}
	}
	s.h[name] = s.slot(value)
}

// slot returns a 1-value slice holding value: the next free slot, whose
// capacity is 1 (a full slice expression), so that an Add to the field
// later, by another mount or by the handler, copies it instead of writing
// into the next field's slot.
func (s *fieldSink) slot(value string) []string {
	i := s.next
	if i >= len(s.vals) {
		return []string{value}
	}
	s.next++
	v := s.vals[i : i+1 : i+1]
	v[0] = value
	return v
}
