package limit

import (
	"net/http"
	"net/netip"
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
