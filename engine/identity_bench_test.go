package limit

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// BenchHeader is one configuration of the identity benchmarks.
type BenchHeader struct {
	Name string
	Opt  Option
	Hdr  http.Header
}

// BenchHeaders are the forwarding headers of the parse-cost benchmarks: each
// configuration with a short header and with the same rightmost members
// behind 1 MB of client-supplied members. (Exported for the external test
// package's BenchmarkCheckIdentity.)
func BenchHeaders() []BenchHeader {
	mb := strings.Repeat("6.6.6.6, ", (1<<20)/9)
	mbFwd := strings.Repeat("for=6.6.6.6, ", (1<<20)/13)
	cidr := WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))
	return []BenchHeader{
		{"xff_hops2/short", WithTrustedHeader("X-Forwarded-For", 2), http.Header{hXForwardedFor: {"203.0.113.9, 10.0.0.1"}}},
		{"xff_hops2/1MB", WithTrustedHeader("X-Forwarded-For", 2), http.Header{hXForwardedFor: {mb + "203.0.113.9, 10.0.0.1"}}},
		{"forwarded_hops2/short", WithTrustedHeader("Forwarded", 2), http.Header{hForwarded: {`for="203.0.113.9:4711";proto=https, for=10.0.0.1`}}},
		{"forwarded_hops2/1MB", WithTrustedHeader("Forwarded", 2), http.Header{hForwarded: {mbFwd + `for="203.0.113.9:4711";proto=https, for=10.0.0.1`}}},
		{"proxies/short", cidr, http.Header{hXForwardedFor: {"203.0.113.9, 10.0.0.1"}}},
		{"proxies/1MB", cidr, http.Header{hXForwardedFor: {mb + "203.0.113.9, 10.0.0.1"}}},
		{"proxies_all_trusted/1MB", cidr, http.Header{hXForwardedFor: {strings.Repeat("10.1.1.1, ", (1<<20)/10) + "10.0.0.1"}}},
	}
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
