package limit_test

// A Structured Field Values parser (RFC 9651, section 4.2), written for the
// tests so that the RateLimit fields are checked by parsing them back rather
// than by comparing strings with the code that wrote them. It covers Lists,
// Inner Lists, Items and Parameters with Integer, Decimal, String, Token,
// Byte Sequence and Boolean bare items (Date and Display String, which the
// engine never sends, are rejected).

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// sfToken is an sf-token bare item (distinct from an sf-string).
type sfToken string

type sfParam struct {
	Key   string
	Value any // int64, float64, string, sfToken, []byte, bool
}

type sfItem struct {
	Value  any // as sfParam.Value, or []sfItem for an Inner List
	Params []sfParam
}

// param returns the value of the parameter key and whether it is present.
func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

// parseSFList parses the field lines of one List field, combined as RFC 9110
// 5.3 says (joined with ", ").
func parseSFList(lines []string) ([]sfItem, error) {
	p := &sfParser{s: strings.Join(lines, ", ")}
	p.skipSP()
	var out []sfItem
	for !p.eof() {
		it, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errf("expected ',' after a list member")
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, p.errf("trailing comma")
		}
	}
	return out, nil
}

// parseSFItem parses an Item field.
func parseSFItem(s string) (sfItem, error) {
	p := &sfParser{s: s}
	p.skipSP()
	it, err := p.item()
	if err != nil {
		return it, err
	}
	p.skipSP()
	if !p.eof() {
		return it, p.errf("trailing characters")
	}
	return it, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) errf(format string, args ...any) error {
	return fmt.Errorf("sf: at %d in %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) member() (sfItem, error) {
	if !p.eof() && p.s[p.i] == '(' {
		return p.innerList()
	}
	return p.item()
}

func (p *sfParser) innerList() (sfItem, error) {
	p.i++ // '('
	var items []sfItem
	for !p.eof() {
		p.skipSP()
		if !p.eof() && p.s[p.i] == ')' {
			p.i++
			params, err := p.params()
			return sfItem{Value: items, Params: params}, err
		}
		it, err := p.item()
		if err != nil {
			return sfItem{}, err
		}
		items = append(items, it)
		if p.eof() || (p.s[p.i] != ' ' && p.s[p.i] != ')') {
			return sfItem{}, p.errf("inner list members must be separated by SP")
		}
	}
	return sfItem{}, p.errf("unterminated inner list")
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	return sfItem{Value: v, Params: params}, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for !p.eof() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if !p.eof() && p.s[p.i] == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range out { // a later duplicate overwrites (RFC 9651 4.2.3.2)
			if out[j].Key == key {
				out[j].Value, replaced = v, true
			}
		}
		if !replaced {
			out = append(out, sfParam{key, v})
		}
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	if p.eof() || !(p.s[p.i] == '*' || ('a' <= p.s[p.i] && p.s[p.i] <= 'z')) {
		return "", p.errf("key must start with lcalpha or '*'")
	}
	start := p.i
	for !p.eof() {
		c := p.s[p.i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.errf("expected a bare item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z'):
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	}
	return nil, p.errf("unexpected %q", p.s[p.i])
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.eof() || p.s[p.i] < '0' || p.s[p.i] > '9' {
		return nil, p.errf("expected a digit")
	}
	digits, frac, dot := 0, 0, false
	for !p.eof() {
		c := p.s[p.i]
		if c == '.' && !dot {
			if digits > 12 {
				return nil, p.errf("decimal with more than 12 integer digits")
			}
			dot = true
			p.i++
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if dot {
			frac++
		} else {
			digits++
		}
		p.i++
	}
	text := p.s[start:p.i]
	if !dot {
		if digits > 15 {
			return nil, p.errf("integer with more than 15 digits")
		}
		return strconv.ParseInt(text, 10, 64)
	}
	if frac < 1 || frac > 3 {
		return nil, p.errf("decimal needs 1 to 3 fraction digits")
	}
	return strconv.ParseFloat(text, 64)
}

func (p *sfParser) str() (any, error) {
	p.i++ // '"'
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() {
				return nil, p.errf("backslash at the end")
			}
			n := p.s[p.i]
			if n != '"' && n != '\\' {
				return nil, p.errf("backslash may only escape '\"' or '\\\\', not %q", n)
			}
			b.WriteByte(n)
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errf("byte %#x is not allowed in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errf("unterminated string")
}

func (p *sfParser) token() (any, error) {
	start := p.i
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if !(isTchar(c) || c == ':' || c == '/') {
			break
		}
		p.i++
	}
	return sfToken(p.s[start:p.i]), nil
}

func isTchar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) bytes() (any, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errf("unterminated byte sequence")
	}
	b, err := base64.StdEncoding.DecodeString(p.s[p.i : p.i+end])
	if err != nil {
		return nil, p.errf("byte sequence: %v", err)
	}
	p.i += end + 1
	return b, nil
}

func (p *sfParser) boolean() (any, error) {
	p.i++ // '?'
	if p.eof() || (p.s[p.i] != '0' && p.s[p.i] != '1') {
		return nil, p.errf("boolean must be ?0 or ?1")
	}
	v := p.s[p.i] == '1'
	p.i++
	return v, nil
}

// The parser is itself tested against RFC 9651's rules, so that a parse that
// succeeds below means something.
func TestSFParser(t *testing.T) {
	valid := []struct {
		name string
		in   []string
		want string // %v of the parsed members
	}{
		{"rfc_example_list", []string{`sugar, tea, rum`}, `[{sugar []} {tea []} {rum []}]`},
		{"params", []string{`abc;a=1;b=2; cde_456, (ghi;jk=4 l);q="9";r=w`}, `[{abc [{a 1} {b 2} {cde_456 true}]} {[{ghi [{jk 4}]} {l []}] [{q 9} {r w}]}]`},
		{"lines_combined", []string{`"a";q=1`, `"b";q=2`}, `[{a [{q 1}]} {b [{q 2}]}]`},
		{"escapes", []string{`"x\"y\\z"`}, `[{x"y\z []}]`},
		{"decimal_bool_bytes", []string{`1.5;x=?0, :aGk=:`}, `[{1.5 [{x false}]} {[104 105] []}]`},
		{"empty", []string{``}, `[]`},
		{"ows", []string{"a ,\tb"}, `[{a []} {b []}]`},
		{"duplicate_param_overwrites", []string{`a;x=1;x=2`}, `[{a [{x 2}]}]`},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSFList(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprintf("%v", got); s != tc.want && !(tc.want == "[]" && got == nil) {
				t.Fatalf("parsed %s, want %s", s, tc.want)
			}
		})
	}
	invalid := []struct{ name, in string }{
		{"trailing_comma", `a, b,`},
		{"bad_escape", `"a\b"`},
		{"unterminated_string", `"abc`},
		{"control_byte", "\"a\x01\""},
		{"non_ascii", "\"caf\xc3\xa9\""},
		{"integer_16_digits", `1234567890123456`},
		{"decimal_4_fraction", `1.2345`},
		{"uppercase_key", `a;Q=1`},
		{"missing_comma", `a b`},
		{"bad_boolean", `?2`},
		{"param_without_item", `;q=1`},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := parseSFList([]string{tc.in}); err == nil {
				t.Fatalf("parsed %q as %v, want an error", tc.in, got)
			}
		})
	}
	if _, err := parseSFItem(`5, 6`); err == nil {
		t.Fatal("an Item field accepted a list")
	}
	if it, err := parseSFItem(` 42 `); err != nil || it.Value != int64(42) {
		t.Fatalf("item 42: %v %v", it, err)
	}
}
