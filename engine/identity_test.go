package limit

import (
	"net/netip"
	"testing"
)

// canonicalIPv4 must agree with the general path (ParseAddr + AppendTo)
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
		a, ok2 := ParseAddr(s)
		if !ok2 || a.String() != host || !a.Is4() {
			t.Errorf("canonicalIPv4(%q) = %q, but ParseAddr says %v %v", s, host, a, ok2)
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
		a, ok2 := ParseAddr(s)
		if !ok2 || a != netip.MustParseAddr(host) || a.String() != host {
			t.Fatalf("canonicalIPv4(%q) = %q; ParseAddr: %v %v", s, host, a, ok2)
		}
	})
}
