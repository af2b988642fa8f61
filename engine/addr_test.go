package limit

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParseAddr covers the socket-peer parser (parsePeer) on its own.
func TestParseAddr(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string // want "" means not ok
	}{
		{"ipv4", "192.0.2.1", "192.0.2.1"},
		{"ipv4_port", "192.0.2.1:40001", "192.0.2.1"},
		{"ipv6", "2001:db8::1", "2001:db8::1"},
		{"ipv6_brackets", "[2001:db8::1]", "2001:db8::1"},
		{"ipv6_brackets_port", "[2001:db8::1]:443", "2001:db8::1"},
		{"ipv6_zone", "fe80::1%eth0", "fe80::1"},
		{"ipv6_zone_brackets_port", "[fe80::1%25eth0]:80", "fe80::1"},
		{"ipv4_mapped", "::ffff:192.0.2.1", "192.0.2.1"},
		{"ipv4_mapped_brackets_port", "[::ffff:192.0.2.1]:40003", "192.0.2.1"},
		{"port_leading_zeros", "192.0.2.1:0080", "192.0.2.1"},
		{"empty", "", ""},
		{"unspecified_v4", "0.0.0.0", ""},
		{"unspecified_v6", "[::]:80", ""},
		{"unspecified_mapped", "::ffff:0.0.0.0", ""},
		{"empty_port", "192.0.2.1:", ""},
		{"port_too_big", "192.0.2.1:65536", ""},
		{"port_not_digits", "192.0.2.1:http", ""},
		{"ipv4_in_brackets", "[192.0.2.1]:80", ""},
		{"zone_on_ipv4", "192.0.2.1%eth0", ""},
		{"empty_zone", "fe80::1%", ""},
		{"unclosed_bracket", "[2001:db8::1:443", ""},
		{"junk_after_bracket", "[2001:db8::1]x", ""},
		{"host_name", "example.com", ""},
		{"unknown", "unknown", ""},
		{"spaces_not_trimmed", " 192.0.2.1", ""},
		{"too_long", strings.Repeat("1", 101), ""},
		{"ipv6_port_without_brackets_is_not_a_port", "2001:db8::1:443", "2001:db8::1:443"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, ok := parsePeer(tc.in)
			got := ""
			if ok {
				got = a.String()
			}
			if got != tc.want {
				t.Errorf("parsePeer(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			}
		})
	}
}

// canonicalIPv4 must agree with the general path (parsePeer + AppendTo)
// whenever it answers.
func TestCanonicalIPv4AgreesWithParseAddr(t *testing.T) {
	for _, s := range []string{
		"192.0.2.1:40001", "192.0.2.1", "10.0.0.0:1", "255.255.255.255:65535", "1.2.3.4:",
		"01.2.3.4:1", "1.2.3:4", "1.2.3.4.5", "256.1.1.1:1", "0.0.0.0:80", "1.2.3.4:x",
		"1.2.3.4%eth0:1", "[1.2.3.4]:1", "", "::1", "1.2.3.4 ", "1..3.4",
	} {
		host, ok := canonicalIPv4(s)
		if !ok {
			continue
		}
		a, ok2 := parsePeer(s)
		if !ok2 || a.String() != host || !a.Is4() {
			t.Errorf("canonicalIPv4(%q) = %q, but parsePeer says %v %v", s, host, a, ok2)
		}
	}
}

func FuzzCanonicalIPv4(f *testing.F) {
	for _, s := range []string{"192.0.2.1:40001", "0.0.0.0:1", "001.2.3.4:5", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, ok := canonicalIPv4(s)
		if !ok {
			return
		}
		a, ok2 := parsePeer(s)
		if !ok2 || a != netip.MustParseAddr(host) || a.String() != host {
			t.Fatalf("canonicalIPv4(%q) = %q; parsePeer: %v %v", s, host, a, ok2)
		}
	})
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"192.0.2.1:40001", "[::ffff:192.0.2.1]:40003", "[fe80::1%eth0]:80", "2001:db8::1", "0.0.0.0", "[1.2.3.4]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := parsePeer(s)
		if !ok {
			if a.IsValid() {
				t.Fatalf("not ok but a valid address %v", a)
			}
		} else {
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() {
				t.Fatalf("%q gave %v, which is not a normalised client address", s, a)
			}
			if b, ok := parsePeer(a.String()); !ok || b != a {
				t.Fatalf("%v does not parse back (%v %v)", a, b, ok)
			}
		}
		if strings.IndexByte(s, '%') < 0 {
			want, wok := refParseAddr(s, false)
			if wok != ok || want != a {
				t.Fatalf("parsePeer(%q) = %v %v, reference %v %v", s, a, ok, want, wok)
			}
		}
	})
}

// The fast path for a plain IPv4 peer accepts only what the general parser
// accepts, and gives the same text: a peer of any length, any spelling.
func FuzzCanonicalIPv4AgreesWithParsePeer(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:40001", "0.0.0.0:1", "001.2.3.4:5", "1.2.3.4", "1.2.3.4:0", "255.255.255.255:65535",
		"1.2.3.4:065535", "9.9.9.9:99999", "256.1.1.1:1", "1.2.3:4", "1.2.3.4:", "[1.2.3.4]:5",
		"192.0.2.1:" + strings.Repeat("0", 200) + "80", // longer than any peer parsePeer reads
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, ok := canonicalIPv4(s)
		if !ok {
			return
		}
		if a, ok := parsePeer(s); !ok || !a.Is4() || a.String() != host {
			t.Fatalf("canonicalIPv4(%q) = %q; parsePeer: %v %v", s, host, a, ok)
		}
	})
}
