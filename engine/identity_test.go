package limit

import (
	"net/netip"
	"testing"
)

func TestParseAddr(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // "" means not ok
	}{
		{"ipv4", "192.0.2.1", "192.0.2.1"},
		{"ipv4_port", "192.0.2.1:4711", "192.0.2.1"},
		{"ipv6", "2001:db8::1", "2001:db8::1"},
		{"ipv6_brackets", "[2001:db8::1]", "2001:db8::1"},
		{"ipv6_port", "[2001:db8::1]:443", "2001:db8::1"},
		{"ipv6_zone_stripped", "[fe80::1%eth0]:443", "fe80::1"},
		{"ipv6_bare_zone_stripped", "fe80::1%eth0", "fe80::1"},
		{"ipv4_mapped_unmapped", "[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"unspecified_v4", "0.0.0.0", ""},
		{"unspecified_v6_port", "[::]:80", ""},
		{"empty", "", ""},
		{"garbage", "not-an-address", ""},
		{"ipv4_bad_port", "192.0.2.1:x", ""},
		{"ipv6_unclosed", "[2001:db8::1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := ParseAddr(tc.in)
			if tc.want == "" {
				if ok {
					t.Fatalf("ParseAddr(%q) = %v, want not ok", tc.in, a)
				}
				return
			}
			if !ok || a != netip.MustParseAddr(tc.want) {
				t.Fatalf("ParseAddr(%q) = %v, %v; want %s", tc.in, a, ok, tc.want)
			}
		})
	}
}

// Adapters pass the peer as "ip:port" (net/http) or a bare address (fiber):
// neither may cost an allocation.
func TestParseAddrDoesNotAllocate(t *testing.T) {
	for _, s := range []string{"192.0.2.1", "192.0.2.1:4711", "2001:db8::1", "[2001:db8::1]:443", "[2001:db8::1]"} {
		if n := testing.AllocsPerRun(100, func() { ParseAddr(s) }); n != 0 {
			t.Errorf("ParseAddr(%q) allocates %v times", s, n)
		}
	}
}
