package app

import (
	"strings"
	"testing"
)

// TestBuildTrustFlags: the trust flags reach the engine, and its
// construction errors (bad hops, both configurations) come back from Build.
func TestBuildTrustFlags(t *testing.T) {
	cases := []struct {
		name    string
		c       Config
		errWant string // "" means accepted
	}{
		{"none", Config{}, ""},
		{"xff_two_hops", Config{TrustedHeader: "X-Forwarded-For", TrustedHops: 2}, ""},
		{"cf_connecting_ip", Config{TrustedHeader: "CF-Connecting-IP", TrustedHops: 1}, ""},
		{"proxies_cidrs_and_address", Config{TrustedProxies: "10.0.0.0/8, 2001:db8::/32,127.0.0.1"}, ""},
		{"bad_hops", Config{TrustedHeader: "X-Forwarded-For", TrustedHops: 0}, "hops must be within"},
		{"bad_cidr", Config{TrustedProxies: "10.0.0.0/33"}, "-trusted-proxies"},
		{"both", Config{TrustedHeader: "X-Real-IP", TrustedHops: 1, TrustedProxies: "10.0.0.0/8"}, "exclusive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Disclosure, tc.c.Headers = "retry-after", "ietf"
			_, err := Build(tc.c, nil)
			switch {
			case tc.errWant == "" && err != nil:
				t.Fatalf("Build: %v", err)
			case tc.errWant != "" && (err == nil || !strings.Contains(err.Error(), tc.errWant)):
				t.Fatalf("Build error %v, want one containing %q", err, tc.errWant)
			}
		})
	}
}
