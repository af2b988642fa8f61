package limit

import (
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"
)

// TestParseCostBoundedByConfiguration: a header of 1 MB, whatever it holds
// left of the hops the configuration needs, is parsed by examining at most the
// configured budget, and gives the same key as the short header.
func TestParseCostBoundedByConfiguration(t *testing.T) {
	t.Parallel()
	junk := strings.Repeat("6.6.6.6, ", (1<<20)/9)
	noCommas := strings.Repeat("x", 1<<20)
	quoted := `for="` + strings.Repeat(`\"a,`, (1<<20)/4) + `"`
	backslashes := strings.Repeat(`\`, 1<<20) + `"`
	cases := []struct {
		name   string
		opt    Option
		lines  []string
		rfc    bool
		hops   int
		wantID string
	}{
		{"xff_hops2_after_1mb_of_members", WithTrustedHeader("X-Forwarded-For", 2), []string{junk + "203.0.113.9, 10.0.0.1"}, false, 2, "r:203.0.113.9"},
		{"xff_hops1_after_1mb_without_commas", WithTrustedHeader("X-Forwarded-For", 1), []string{noCommas + ", 203.0.113.9"}, false, 1, "r:203.0.113.9"},
		{"xff_1mb_member_unusable", WithTrustedHeader("X-Forwarded-For", 1), []string{noCommas}, false, 1, "r:10.0.0.2"},
		{"forwarded_after_1mb_quoted_string", WithTrustedHeader("Forwarded", 1), []string{quoted + ", for=203.0.113.9"}, true, 1, "r:203.0.113.9"},
		{"forwarded_1mb_quoted_string_unusable", WithTrustedHeader("Forwarded", 2), []string{quoted + ", for=203.0.113.9"}, true, 2, "r:10.0.0.2"},
		{"forwarded_1mb_backslash_run_unusable", WithTrustedHeader("Forwarded", 1), []string{backslashes}, true, 1, "r:10.0.0.2"},
		{"xff_100k_empty_lines", WithTrustedHeader("X-Forwarded-For", 1), append([]string{"203.0.113.9"}, make([]string, 100000)...), false, 1, "r:10.0.0.2"},
		{"proxies_walk_1mb_of_trusted_members", WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")), []string{strings.Repeat("10.1.1.1, ", (1<<20)/10) + "10.0.0.3"}, false, maxTrustedHops, "r:10.1.1.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			it := newListIter(tc.lines, tc.rfc, tc.hops)
			bound := it.budget
			for range tc.hops {
				if _, st := it.member(); st != memberOK {
					break
				}
			}
			if it.scanned > bound || bound > tc.hops*(maxForwardedElement+2) {
				t.Fatalf("examined %d bytes; bound %d", it.scanned, bound)
			}
			name := hXForwardedFor
			if tc.rfc {
				name = hForwarded
			}
			c := &config{}
			if err := tc.opt(c); err != nil {
				t.Fatal(err)
			}
			ca := c.trust.resolve(http.Header{name: tc.lines}, netip.MustParseAddr("10.0.0.2"), true)
			if id := "r:" + ca.addr.String(); id != tc.wantID {
				t.Fatalf("key %q, want %q", id, tc.wantID)
			}
		})
	}
}

// The fuzz targets below check the identity parsers against reference
// implementations that share no code with them: the references split whole
// header lines from the left with the standard library and parse addresses
// with net/netip directly. Seed corpora live in testdata/fuzz/<target>/; run
// one target with e.g.
//
//	go test -run '^$' -fuzz '^FuzzXForwardedForHops$' -fuzztime 30s
//
// Properties: no panic; with no trust configured no header changes the key;
// a key taken from a header is the member at the configured hop (count mode)
// or a member right of which every hop is trusted (WithTrustedProxies); the
// parse examines at most the bytes its configuration allows, and adding text
// left of the hop it needs changes nothing.

// refObfPort matches an address followed by an RFC 7239 obfuscated port.
var refObfPort = regexp.MustCompile(`^(.*[^:]):_[A-Za-z0-9._-]+$`)

// refParseAddr is the reference address parser: net/netip's own forms, the
// zone dropped, IPv4-mapped unmapped, the unspecified addresses rejected, at
// most maxAddrText bytes.
func refParseAddr(s string, obf bool) (netip.Addr, bool) {
	if len(s) > maxAddrText {
		return netip.Addr{}, false
	}
	if obf {
		if m := refObfPort.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
	}
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil || a.Is4() {
			return netip.Addr{}, false
		}
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, false
	}
	a = a.WithZone("").Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// refXFFMembers splits X-Forwarded-For lines into their non-empty members,
// left to right.
func refXFFMembers(lines []string) []string {
	var out []string
	for _, l := range lines {
		for _, m := range strings.Split(l, ",") {
			if m = strings.Trim(m, " \t"); m != "" {
				out = append(out, m)
			}
		}
	}
	return out
}

// refForwardedMembers splits Forwarded lines into their non-empty elements,
// left to right, honouring quoted strings and quoted-pairs. wellFormed is
// false when a line ends inside a quoted string or has a backslash outside
// one; for such input "the n-th member" is not defined.
func refForwardedMembers(lines []string) (members []string, wellFormed bool) {
	wellFormed = true
	for _, l := range lines {
		parts, ok := refSplitOutsideQuotes(l, ',')
		wellFormed = wellFormed && ok
		for _, p := range parts {
			if m := strings.Trim(p, " \t"); m != "" {
				members = append(members, m)
			}
		}
	}
	return members, wellFormed
}

// refForwardedFor extracts the single for= value of an element: pairs split
// on ';' outside quotes, names compared case-insensitively, quotes removed.
func refForwardedFor(elem string) (string, bool) {
	pairs, _ := refSplitOutsideQuotes(elem, ';')
	var vals []string
	for _, p := range pairs {
		name, v, ok := strings.Cut(strings.Trim(p, " \t"), "=")
		if ok && strings.EqualFold(name, "for") {
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			vals = append(vals, v)
		}
	}
	if len(vals) != 1 {
		return "", false
	}
	return vals[0], true
}

// refSplitOutsideQuotes splits s at every sep outside a quoted string (a
// quoted-pair's escaped character is never a quote or a separator), parts
// untrimmed, empty ones kept. wellFormed is false when s ends inside a
// quoted string or has a backslash outside one.
func refSplitOutsideQuotes(s string, sep byte) (parts []string, wellFormed bool) {
	wellFormed = true
	start, inQ := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQ && c == '\\':
			i++
		case c == '\\':
			wellFormed = false
		case c == '"':
			inQ = !inQ
		case c == sep && !inQ:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:]), wellFormed && !inQ
}

func fuzzLines(raw string) []string { return strings.Split(raw, "\n") }

func fuzzHeader(name string, lines []string) http.Header {
	return http.Header{http.CanonicalHeaderKey(name): lines}
}

// checkScanBound walks lines as the count-mode parse does and checks that
// the bytes examined stay within the configured budget.
func checkScanBound(t *testing.T, lines []string, rfc7239 bool, members int) {
	t.Helper()
	it := newListIter(lines, rfc7239, members)
	bound := it.budget
	for range members {
		if _, st := it.member(); st != memberOK {
			break
		}
	}
	if it.scanned > bound {
		t.Fatalf("examined %d bytes, over the bound %d for %d members", it.scanned, bound, members)
	}
}

// checkCountMode is the shared body of the count-mode fuzz targets.
func checkCountMode(t *testing.T, name string, raw string, hopsByte uint8) {
	hops := 1 + int(hopsByte)%maxTrustedHops
	tc := &config{}
	if err := WithTrustedHeader(name, hops)(tc); err != nil {
		t.Fatal(err)
	}
	tr := &tc.trust
	lines := fuzzLines(raw)
	peer := netip.MustParseAddr("10.0.0.2")
	got := tr.resolve(fuzzHeader(name, lines), peer, true)
	rfc7239 := tr.format == formatForwarded

	// The parse examines at most hops members' worth of bytes.
	checkScanBound(t, lines, rfc7239, hops)

	// Text added left of everything (a new first line) changes nothing
	// unless the walk ran off the left end of the list.
	if got.issue != issueTrustedHeaderMissing {
		junk := strings.Repeat(raw+`,"\x00 `, 1+(1<<14)/(len(raw)+5))
		again := tr.resolve(fuzzHeader(name, append([]string{junk}, lines...)), peer, true)
		if again != got {
			t.Fatalf("text left of the hop changed the result: %+v then %+v", got, again)
		}
	}

	switch got.src {
	case KeySourceSocket:
		if got.addr != peer || got.issue == "" {
			t.Fatalf("socket fallback %+v without the peer or without an issue", got)
		}
	case KeySourceHeader:
		if got.issue != "" {
			t.Fatalf("header key with an issue: %+v", got)
		}
	default:
		t.Fatalf("source %q", got.src)
	}

	var members []string
	wellFormed := true
	if rfc7239 {
		members, wellFormed = refForwardedMembers(lines)
	} else {
		members = refXFFMembers(lines)
	}
	if !wellFormed {
		return // the n-th member is not defined; the bounds above still hold
	}
	if got.issue == issueTrustedHeaderMissing && len(members) >= hops {
		t.Fatalf("reported %d hops missing, but the list has %d members: %q", hops, len(members), members)
	}
	if got.src != KeySourceHeader {
		return
	}
	if len(members) < hops {
		t.Fatalf("keyed on the header with %d members for %d hops", len(members), hops)
	}
	target := members[len(members)-hops]
	if rfc7239 {
		v, ok := refForwardedFor(target)
		if !ok {
			t.Fatalf("keyed on %v from element %q that has no single for=", got.addr, target)
		}
		target = v
	}
	want, ok := refParseAddr(target, rfc7239)
	if !ok || want != got.addr {
		t.Fatalf("keyed on %v, but the member at hop %d is %q (reference: %v %v)", got.addr, hops, target, want, ok)
	}
}

func FuzzXForwardedForHops(f *testing.F) {
	f.Add("203.0.113.9", uint8(0))
	f.Add("6.6.6.6, 203.0.113.9, 198.51.100.7", uint8(1))
	f.Add("6.6.6.6\n203.0.113.9:80 ,\t[2001:db8::1]:443", uint8(1))
	f.Fuzz(func(t *testing.T, raw string, hops uint8) {
		checkCountMode(t, hXForwardedFor, raw, hops)

		// Members the reference can parse, short and zone-free, are
		// accepted by the engine's parser too, and as the same address.
		for _, m := range refXFFMembers(fuzzLines(raw)) {
			if strings.IndexByte(m, '%') >= 0 {
				continue
			}
			want, wok := refParseAddr(m, false)
			got, gok := parseAddrText(m, false)
			if wok != gok || want != got {
				t.Fatalf("member %q: engine %v %v, reference %v %v", m, got, gok, want, wok)
			}
		}
	})
}

func FuzzForwardedHops(f *testing.F) {
	f.Add(`for="[2001:db8:cafe::17]:4711"`, uint8(0))
	f.Add("for=6.6.6.6, for=203.0.113.9;proto=https, by=10.0.0.1;for=198.51.100.7", uint8(1))
	f.Add(`for=203.0.113.9;host="a\",b", for=198.51.100.7`, uint8(1))
	f.Fuzz(func(t *testing.T, raw string, hops uint8) {
		checkCountMode(t, hForwarded, raw, hops)
	})
}

func FuzzSingleValueHeader(f *testing.F) {
	f.Add("203.0.113.9")
	f.Add(" [2001:db8::1]:443 ")
	f.Add("6.6.6.6\n203.0.113.9")
	f.Fuzz(func(t *testing.T, raw string) {
		tc := &config{}
		if err := WithTrustedHeader("CF-Connecting-IP", 1)(tc); err != nil {
			t.Fatal(err)
		}
		lines := fuzzLines(raw)
		peer := netip.MustParseAddr("10.0.0.2")
		got := tc.trust.resolve(fuzzHeader("CF-Connecting-IP", lines), peer, true)
		if got.src != KeySourceHeader {
			if got.addr != peer || got.issue == "" {
				t.Fatalf("fallback %+v without the peer or an issue", got)
			}
			return
		}
		if len(lines) != 1 {
			t.Fatalf("keyed on a single-value header sent as %d lines", len(lines))
		}
		want, ok := refParseAddr(strings.Trim(lines[0], " \t"), false)
		if !ok || want != got.addr {
			t.Fatalf("keyed on %v from %q (reference %v %v)", got.addr, lines[0], want, ok)
		}
	})
}

// fuzzPrefixes are the trusted networks of FuzzTrustedProxiesWalk.
var fuzzPrefixes = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ff::/48")}

func refTrusted(a netip.Addr) bool {
	for _, p := range fuzzPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func FuzzTrustedProxiesWalk(f *testing.F) {
	f.Add("6.6.6.6, 203.0.113.9, 10.1.1.1", "10.0.0.2:1")
	f.Add("unknown, 10.1.1.1", "[::ffff:10.0.0.2]:80")
	f.Add("10.9.9.9\n2001:db8:ff::1", "10.0.0.2:1")
	f.Add("203.0.113.9", "198.51.100.7:1")
	f.Fuzz(func(t *testing.T, raw, peerText string) {
		tc := &config{}
		if err := WithTrustedProxies(fuzzPrefixes...)(tc); err != nil {
			t.Fatal(err)
		}
		lines := fuzzLines(raw)
		peer, peerOK := parsePeer(peerText)
		got := tc.trust.resolve(fuzzHeader(hXForwardedFor, lines), peer, peerOK)
		checkScanBound(t, lines, false, maxTrustedHops)

		if !peerOK {
			if got.src != "" || got.issue != "" {
				t.Fatalf("no peer, but %+v", got)
			}
			return
		}
		if !refTrusted(peer) {
			if got.src != KeySourceSocket || got.addr != peer || got.issue != "" {
				t.Fatalf("untrusted peer %v, but %+v: the header was read", peer, got)
			}
			return
		}
		if got.src == KeySourceSocket {
			if got.addr != peer {
				t.Fatalf("socket key %v is not the peer %v", got.addr, peer)
			}
			return
		}
		// Keyed on a member: every member right of it must be a trusted
		// address, so that no untrusted hop could have written it.
		members := refXFFMembers(lines)
		for i := len(members) - 1; i >= 0; i-- {
			a, ok := refParseAddr(members[i], false)
			if ok && a == got.addr {
				return
			}
			if !ok || !refTrusted(a) {
				t.Fatalf("keyed on %v, left of the untrusted or malformed hop %q in %q", got.addr, members[i], members)
			}
		}
		t.Fatalf("keyed on %v, which is not a member of %q", got.addr, members)
	})
}

// BenchmarkTrustedHeaderParse measures the client-address derivation alone
// (header lookup, right-to-left parse, address parse) for a short and a 1 MB
// header. The two should be within a small constant factor: the parse stops
// at the hop it needs.
func BenchmarkTrustedHeaderParse(b *testing.B) {
	peer := netip.MustParseAddr("10.0.0.2")
	for _, bc := range BenchHeaders() {
		b.Run(bc.Name, func(b *testing.B) {
			c := &config{}
			if err := bc.Opt(c); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if ca := c.trust.resolve(bc.Hdr, peer, true); !ca.addr.IsValid() {
					b.Fatal("no address")
				}
			}
		})
	}
}
