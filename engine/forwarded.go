package limit

import (
	"net/netip"
	"strings"
)

// Parsing of client-address header lists (X-Forwarded-For, RFC 7239
// Forwarded) from the right; each member's address is read by addr.go.
//
// Cost model: the members a configuration needs are the rightmost ones, which
// the trusted infrastructure wrote; everything to their left may be attacker
// text. So the parse walks from the end of the last header line towards the
// start of the first one and stops at the member it needs. Each member is
// delimited inside a window of at most max+1 bytes, and the whole walk has a
// byte budget of members*(max+2): the work is bounded by the configuration
// (hops, or 16 for a WithTrustedProxies walk), never by the length
// of the header. Members are substrings of the header lines: nothing is copied
// and nothing allocates.

const (
	// maxListMember bounds one X-Forwarded-For member, surrounding whitespace
	// included: the longest address with a zone and a port is far shorter.
	maxListMember = 128
	// maxForwardedElement bounds one RFC 7239 forwarded-element, which may
	// also carry by=, proto= and host= (a host name of up to 253 bytes).
	maxForwardedElement = 512
	// maxBadDetail bounds the text of a malformed member quoted in a log line.
	maxBadDetail = 64
)

// memberStatus is the result of reading one list member.
type memberStatus uint8

const (
	// memberOK: a non-empty member, surrounding whitespace trimmed.
	memberOK memberStatus = iota
	// memberEnd: the list has no further member to the left.
	memberEnd
	// memberBad: the member cannot be delimited within the bounds (longer
	// than the member bound, an unterminated quoted string, or the walk's
	// budget spent).
	memberBad
)

// listIter walks the members of a comma-separated header list from the
// right: several header lines form one list (RFC 9110 5.3), in order, so the
// walk starts at the end of the last line. Empty members are skipped (RFC
// 9110 5.6.1) but their bytes count against the budget. The zero value is an
// empty list.
type listIter struct {
	lines   []string
	cur     string // the unread left part of the line being read
	next    int    // index of the next line to read, counting down
	max     int    // longest member, bytes, whitespace included
	budget  int    // bytes (one per line visited, too) that may still be examined
	rfc7239 bool   // members may hold quoted strings, whose commas do not separate
	scanned int    // bytes examined so far (tests check it against the budget)
}

// newListIter prepares a walk over lines that may return up to members
// members. rfc7239 selects Forwarded elements (quoted strings, 512-byte
// bound) over X-Forwarded-For members (128-byte bound).
func newListIter(lines []string, rfc7239 bool, members int) listIter {
	max := maxListMember
	if rfc7239 {
		max = maxForwardedElement
	}
	return listIter{lines: lines, next: len(lines) - 1, max: max, budget: members * (max + 2), rfc7239: rfc7239}
}

// member returns the next member from the right. On memberBad the string is
// a bounded piece of the offending text, for a log line.
func (it *listIter) member() (string, memberStatus) {
	for {
		if it.cur == "" {
			if it.next < 0 {
				return "", memberEnd
			}
			if it.budget <= 0 {
				return "", memberBad
			}
			it.budget--
			it.cur = it.lines[it.next]
			it.next--
			continue
		}
		window := min(len(it.cur), it.max+1, it.budget)
		lo := len(it.cur) - window
		var comma int
		if it.rfc7239 {
			var ok bool
			comma, ok = lastCommaOutsideQuotes(it.cur, lo)
			if !ok {
				return tail(it.cur), memberBad
			}
		} else if comma = strings.LastIndexByte(it.cur[lo:], ','); comma >= 0 {
			comma += lo
		}
		var m string
		switch {
		case comma >= 0:
			m, it.cur = it.cur[comma+1:], it.cur[:comma]
			it.budget -= len(m) + 1
			it.scanned += len(m) + 1
		case lo == 0:
			m, it.cur = it.cur, ""
			it.budget -= len(m)
			it.scanned += len(m)
		default: // no separator inside the window: too long, or out of budget
			it.scanned += window
			return tail(it.cur), memberBad
		}
		if len(m) > it.max {
			return tail(m), memberBad
		}
		if m = trimOWS(m); m != "" {
			return m, memberOK
		}
	}
}

// lastCommaOutsideQuotes returns the index of the last ',' of s[lo:] that is
// not inside an RFC 9110 quoted-string, or -1. Reading backwards, a '"' opens
// a quoted string (its closing quote); inside, a '"' preceded by an odd number
// of backslashes is a quoted-pair, else the string's opening quote. ok is
// false when s[lo:] cannot be read unambiguously: a quoted string still open
// at the start of the line, or a run of backslashes reaching lo.
func lastCommaOutsideQuotes(s string, lo int) (idx int, ok bool) {
	inQuote := false
	for i := len(s) - 1; i >= lo; i-- {
		switch s[i] {
		case '"':
			if !inQuote {
				inQuote = true
				continue
			}
			n := 0
			for j := i - 1; j >= lo && s[j] == '\\'; j-- {
				n++
			}
			if i-n == lo && lo > 0 {
				return -1, false // the run may go on left of the window
			}
			if n%2 == 1 {
				i -= n // an escaped quote: skip its escapes too
				continue
			}
			inQuote = false
		case ',':
			if !inQuote {
				return i, true
			}
		}
	}
	return -1, !inQuote
}

// forwardedFor returns the value of the for= parameter of one RFC 7239
// forwarded-element, without its quotes. ok is false when the element is
// malformed (a pair without '=', a name that is not a token, a broken quoted
// string, for= given twice) or has no for= parameter. A quoted for= value
// holding a quoted-pair is rejected rather than unescaped: no address needs
// one, and rejecting keeps the parse copy-free.
func forwardedFor(elem string) (string, bool) {
	var val string
	found := false
	for elem != "" {
		end := pairEnd(elem)
		if end < 0 {
			return "", false
		}
		pair := trimOWS(elem[:end])
		if end < len(elem) {
			elem = elem[end+1:]
		} else {
			elem = ""
		}
		if pair == "" {
			continue
		}
		eq := strings.IndexByte(pair, '=')
		if eq <= 0 || !isToken(pair[:eq]) {
			return "", false
		}
		name, v := pair[:eq], pair[eq+1:]
		if v != "" && v[0] == '"' {
			if len(v) < 2 || v[len(v)-1] != '"' {
				return "", false
			}
			v = v[1 : len(v)-1]
			if strings.ContainsAny(v, "\\\"") {
				if !strings.EqualFold(name, "for") {
					continue // another parameter's quoted-pairs are not our concern
				}
				return "", false
			}
		}
		if strings.EqualFold(name, "for") {
			if found {
				return "", false // RFC 7239 4: a parameter occurs at most once per element
			}
			val, found = v, true
		}
	}
	return val, found
}

// pairEnd returns the index of the first ';' of elem outside a quoted string,
// len(elem) when there is none, or -1 when a quoted string is not closed.
func pairEnd(elem string) int {
	inQuote := false
	for i := 0; i < len(elem); i++ {
		switch c := elem[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case c == ';' && !inQuote:
			return i
		}
	}
	if inQuote {
		return -1
	}
	return len(elem)
}

// parseForwardedNode parses the node of a for= value: an address with an
// optional port or obfuscated port. "unknown" and obfuscated identifiers
// ("_hidden", RFC 7239 6.3) are valid syntax but not addresses: ok is false.
func parseForwardedNode(v string) (netip.Addr, bool) {
	if v == "" || v[0] == '_' || strings.EqualFold(v, "unknown") {
		return netip.Addr{}, false
	}
	return parseAddrText(v, true)
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// trimOWS trims RFC 9110 optional whitespace (spaces and tabs).
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// tail returns at most the last maxBadDetail bytes of s, for a log line.
func tail(s string) string {
	if len(s) > maxBadDetail {
		return s[len(s)-maxBadDetail:]
	}
	return s
}
