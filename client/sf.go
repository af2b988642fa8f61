package limitclient

// A parser of RFC 9651 Structured Field Lists, as far as the RateLimit and
// RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers need: every
// syntax of the RFC is recognised (so that a valid field with members or
// parameters of other types still parses), and only a member's name and its
// integer parameters r, t, q and w are kept. It works on the header value in
// place and allocates nothing.

// maxMembers bounds the members kept per field (all field lines together);
// further members are parsed and dropped.
const maxMembers = 16

// absent and invalid are the values of a parameter that a member lacks, or
// carries with a value that is not a non-negative sf-integer.
const (
	absent  int64 = -1
	invalid int64 = -2
)

// member is one list member: its name (the raw sf-string contents or token;
// "" for a member of another type) and its integer parameters.
type member struct {
	name       string
	r, t, q, w int64
}

// members is the result of parsing one field: up to maxMembers members.
type members struct {
	m [maxMembers]member
	n int
}

// parseList parses every line of one field as a List and appends its members
// to ms. It reports false when any line is not a valid List: RFC 9651 says a
// field that fails to parse is ignored as a whole.
func parseList(lines []string, ms *members) bool {
	for _, line := range lines {
		p := sfParser{s: line}
		if !p.list(ms) {
			return false
		}
	}
	return true
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) sp() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// list parses a List (RFC 9651 4.2.1); an empty line is an empty List.
func (p *sfParser) list(ms *members) bool {
	p.sp()
	for !p.eof() {
		m := member{r: absent, t: absent, q: absent, w: absent}
		if p.peek() == '(' {
			if !p.innerList() {
				return false
			}
		} else {
			kind, v, ok := p.bareItem()
			if !ok {
				return false
			}
			if kind == kindString || kind == kindToken {
				m.name = v
			}
		}
		if !p.params(&m) {
			return false
		}
		if m.name != "" && ms.n < maxMembers {
			ms.m[ms.n] = m
			ms.n++
		}
		p.ows()
		if p.eof() {
			return true
		}
		if p.peek() != ',' {
			return false
		}
		p.i++
		p.ows()
		if p.eof() {
			return false // a trailing comma
		}
	}
	return true
}

// innerList parses and drops an Inner List with its items' parameters.
func (p *sfParser) innerList() bool {
	p.i++ // '('
	for !p.eof() {
		p.sp()
		if p.peek() == ')' {
			p.i++
			return true
		}
		if _, _, ok := p.bareItem(); !ok {
			return false
		}
		var drop member
		if !p.params(&drop) {
			return false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return false
		}
	}
	return false
}

// params parses Parameters, keeping the integer values of r, t, q and w in m
// (a later duplicate key replaces an earlier one, as RFC 9651 says).
func (p *sfParser) params(m *member) bool {
	for p.peek() == ';' {
		p.i++
		p.sp()
		key, ok := p.key()
		if !ok {
			return false
		}
		val := invalid // a Boolean true: not an integer
		if p.peek() == '=' {
			p.i++
			kind, v, ok := p.bareItem()
			if !ok {
				return false
			}
			if kind == kindInteger {
				val = nonNegative(v)
			}
		}
		switch key {
		case "r":
			m.r = val
		case "t":
			m.t = val
		case "q":
			m.q = val
		case "w":
			m.w = val
		}
	}
	return true
}

// nonNegative returns the value of a valid sf-integer's text, or invalid for
// a negative one.
func nonNegative(v string) int64 {
	if v[0] == '-' {
		return invalid
	}
	var n int64
	for i := 0; i < len(v); i++ {
		n = n*10 + int64(v[i]-'0')
	}
	return n
}

func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

type itemKind uint8

const (
	kindInteger itemKind = iota + 1
	kindDecimal
	kindString
	kindToken
	kindBytes
	kindBoolean
	kindDate
	kindDisplay
)

// bareItem parses a Bare Item and returns its kind and text: an integer's
// digits (with its sign), a string's contents between the quotes (escapes
// left as sent), a token.
func (p *sfParser) bareItem() (itemKind, string, bool) {
	c := p.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return kindBoolean, "", true
		}
	case c == '@':
		p.i++
		if k, _, ok := p.number(); ok && k == kindInteger {
			return kindDate, "", true
		}
	case c == '%':
		return p.display()
	}
	return 0, "", false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fractional digits).
func (p *sfParser) number() (itemKind, string, bool) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for !p.eof() {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && dot < 0 && digits > 0 {
			if digits > 12 {
				return 0, "", false
			}
			dot = digits
		} else {
			break
		}
		p.i++
		if dot < 0 && digits > 15 {
			return 0, "", false
		}
	}
	if digits == 0 {
		return 0, "", false
	}
	if dot < 0 {
		return kindInteger, p.s[start:p.i], true
	}
	if frac := digits - dot; frac < 1 || frac > 3 {
		return 0, "", false
	}
	return kindDecimal, p.s[start:p.i], true
}

func (p *sfParser) str() (itemKind, string, bool) {
	p.i++ // '"'
	start := p.i
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' && p.s[p.i+1] != '\\' {
				return 0, "", false
			}
			p.i += 2
			continue
		case c == '"':
			v := p.s[start:p.i]
			p.i++
			return kindString, v, true
		case c < 0x20 || c > 0x7e:
			return 0, "", false
		}
		p.i++
	}
	return 0, "", false
}

func (p *sfParser) token() (itemKind, string, bool) {
	start := p.i
	p.i++
	for !p.eof() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return kindToken, p.s[start:p.i], true
}

func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func (p *sfParser) bytes() (itemKind, string, bool) {
	p.i++ // ':'
	for !p.eof() {
		c := p.s[p.i]
		if c == ':' {
			p.i++
			return kindBytes, "", true
		}
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return 0, "", false
		}
		p.i++
	}
	return 0, "", false
}

func (p *sfParser) display() (itemKind, string, bool) {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return 0, "", false
	}
	p.i += 2
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return kindDisplay, "", true
		case c == '%':
			if p.i+2 >= len(p.s) || !isLowerHex(p.s[p.i+1]) || !isLowerHex(p.s[p.i+2]) {
				return 0, "", false
			}
			p.i += 3
			continue
		case c < 0x20 || c > 0x7e:
			return 0, "", false
		}
		p.i++
	}
	return 0, "", false
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }
