package limit

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// benchHeaders are the forwarding headers of the parse-cost benchmarks: each
// configuration with a short header and with the same rightmost members
// behind 1 MB of client-supplied members.
func benchHeaders() []struct {
	name string
	opt  Option
	hdr  http.Header
} {
	mb := strings.Repeat("6.6.6.6, ", (1<<20)/9)
	mbFwd := strings.Repeat("for=6.6.6.6, ", (1<<20)/13)
	cidr := WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))
	return []struct {
		name string
		opt  Option
		hdr  http.Header
	}{
		{"xff_hops2/short", WithTrustedHeader("X-Forwarded-For", 2), http.Header{HeaderXForwardedFor: {"203.0.113.9, 10.0.0.1"}}},
		{"xff_hops2/1MB", WithTrustedHeader("X-Forwarded-For", 2), http.Header{HeaderXForwardedFor: {mb + "203.0.113.9, 10.0.0.1"}}},
		{"forwarded_hops2/short", WithTrustedHeader("Forwarded", 2), http.Header{HeaderForwarded: {`for="203.0.113.9:4711";proto=https, for=10.0.0.1`}}},
		{"forwarded_hops2/1MB", WithTrustedHeader("Forwarded", 2), http.Header{HeaderForwarded: {mbFwd + `for="203.0.113.9:4711";proto=https, for=10.0.0.1`}}},
		{"proxies/short", cidr, http.Header{HeaderXForwardedFor: {"203.0.113.9, 10.0.0.1"}}},
		{"proxies/1MB", cidr, http.Header{HeaderXForwardedFor: {mb + "203.0.113.9, 10.0.0.1"}}},
		{"proxies_all_trusted/1MB", cidr, http.Header{HeaderXForwardedFor: {strings.Repeat("10.1.1.1, ", (1<<20)/10) + "10.0.0.1"}}},
	}
}

// BenchmarkTrustedHeaderParse measures the client-address derivation alone
// (header lookup, right-to-left parse, address parse) for a short and a 1 MB
// header. The two should be within a small constant factor: the parse stops
// at the hop it needs.
func BenchmarkTrustedHeaderParse(b *testing.B) {
	peer := netip.MustParseAddr("10.0.0.2")
	for _, bc := range benchHeaders() {
		b.Run(bc.name, func(b *testing.B) {
			c := &config{}
			if err := bc.opt(c); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if ca := c.trust.resolve(bc.hdr, peer, true); !ca.addr.IsValid() {
					b.Fatal("no address")
				}
			}
		})
	}
}

// BenchmarkCheckIdentity measures a whole allowed decision (in-process test
// store) per identity configuration, short and 1 MB headers included.
func BenchmarkCheckIdentity(b *testing.B) {
	cases := []struct {
		name string
		opt  Option
		hdr  http.Header
	}{
		{"no_trust/spoofed_xff_ignored", nil, http.Header{HeaderXForwardedFor: {"203.0.113.9"}}},
	}
	cases = append(cases, benchHeaders()...)
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			l := MustNew(newIDStore(), Policy{Limit: 1 << 30, Window: 1e9}, bc.opt)
			r := Request{Peer: "10.0.0.2:40001", Header: bc.hdr}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if !l.Check(ctx, r).Decision.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
