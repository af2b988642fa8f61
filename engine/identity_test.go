package limit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

func hashed(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "h:" + hex.EncodeToString(sum[:])
}

// TestClientIdentityChain runs the precedence chain (KeyFunc -> trusted header ->
// socket peer -> fallback) over the trust configurations and the address
// forms a client or a proxy can produce.
func TestClientIdentityChain(t *testing.T) {
	t.Parallel()
	xff1 := []limit.Option{limit.WithTrustedHeader("X-Forwarded-For", 1)}
	xff2 := []limit.Option{limit.WithTrustedHeader("X-Forwarded-For", 2)}
	fwd1 := []limit.Option{limit.WithTrustedHeader("Forwarded", 1)}
	fwd2 := []limit.Option{limit.WithTrustedHeader("Forwarded", 2)}
	realIP := []limit.Option{limit.WithTrustedHeader("X-Real-IP", 1)}
	cidr := []limit.Option{limit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fe80::/10"))}
	keyFn := func(id string, err error) func(limit.Request) (string, error) {
		return func(limit.Request) (string, error) { return id, err }
	}
	long := strings.Repeat("u", 200)
	var chain20 []string
	for i := 20; i >= 1; i-- {
		chain20 = append(chain20, "10.0.1."+strconv.Itoa(i))
	}
	miss := []limit.Issue{limit.Issue("trusted-header-missing")}
	unusable := []limit.Issue{limit.Issue("trusted-header-unusable")}
	noAddr := []limit.Issue{limit.Issue("no-client-address")}

	cases := []struct {
		name    string
		opts    []limit.Option
		keyFunc func(limit.Request) (string, error)
		peer    string
		header  []string // "Name: value", one element per header line
		src     limit.KeySource
		id      string
		issues  []limit.Issue
	}{
		// Nothing trusted: no header is ever read.
		{name: "no_trust_socket_ipv4", peer: "192.0.2.1:40001", src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "no_trust_spoofed_xff_ignored", peer: "192.0.2.1:40001", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "no_trust_spoofed_x_real_ip_ignored", peer: "192.0.2.1:40001", header: []string{"X-Real-IP: 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "no_trust_spoofed_true_client_ip_ignored", peer: "192.0.2.1:40001", header: []string{"True-Client-IP: 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "no_trust_spoofed_cf_connecting_ip_ignored", peer: "192.0.2.1:40001", header: []string{"CF-Connecting-IP: 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "no_trust_spoofed_forwarded_ignored", peer: "192.0.2.1:40001", header: []string{`Forwarded: for="[2001:db8::1]:443"`}, src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "ipv4_mapped_peer_is_the_ipv4_identity", peer: "[::ffff:192.0.2.1]:40003", src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "bare_ipv4_peer", peer: "192.0.2.1", src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "ipv6_peer_grouped_by_64", peer: "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443", src: limit.KeySourceSocket, id: "r:2001:db8:1:2::"},
		{name: "ipv6_rotation_inside_64_shares_identity", peer: "[2001:db8:1:2::77]:5000", src: limit.KeySourceSocket, id: "r:2001:db8:1:2::"},
		{name: "ipv6_next_64_is_another_identity", peer: "[2001:db8:1:3::77]:5000", src: limit.KeySourceSocket, id: "r:2001:db8:1:3::"},
		{name: "ipv6_zone_stripped", peer: "[fe80::1%eth0]:8080", src: limit.KeySourceSocket, id: "r:fe80::"},
		{name: "ipv6_prefix_configurable_48", opts: []limit.Option{limit.WithAddressPrefixes(32, 48)}, peer: "[2001:db8:1:2::1]:1", src: limit.KeySourceSocket, id: "r:2001:db8:1::"},
		{name: "ipv4_prefix_configurable_24", opts: []limit.Option{limit.WithAddressPrefixes(24, 64)}, peer: "192.0.2.77:1", src: limit.KeySourceSocket, id: "r:192.0.2.0"},
		{name: "hash_keys_hashes_addresses", opts: []limit.Option{limit.WithHashKeys(true)}, peer: "192.0.2.1:1", src: limit.KeySourceSocket, id: hashed("192.0.2.1")},
		{name: "empty_peer_uses_fallback", peer: "", src: limit.KeySourceFallback, id: "r:", issues: noAddr},
		{name: "unix_socket_peer_uses_fallback", peer: "@", src: limit.KeySourceFallback, id: "r:", issues: noAddr},
		{name: "unspecified_peer_uses_fallback", peer: "0.0.0.0:80", src: limit.KeySourceFallback, id: "r:", issues: noAddr},
		{name: "host_name_peer_uses_fallback", peer: "localhost:80", src: limit.KeySourceFallback, id: "r:", issues: noAddr},

		// KeyFunc first.
		{name: "key_func_wins_over_trusted_header", opts: xff1, keyFunc: keyFn("user-42", nil), peer: "192.0.2.1:1", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceKeyFunc, id: "r:k=user-42"},
		{name: "key_func_blank_falls_through", keyFunc: keyFn("  ", nil), peer: "192.0.2.1:1", src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "key_func_error_falls_through", keyFunc: keyFn("user-42", errors.New("no session")), peer: "192.0.2.1:1", src: limit.KeySourceSocket, id: "r:192.0.2.1"},
		{name: "key_func_panic_falls_through", keyFunc: func(limit.Request) (string, error) { panic("boom\n") }, peer: "192.0.2.1:1", src: limit.KeySourceSocket, id: "r:192.0.2.1", issues: []limit.Issue{limit.Issue("key-func-panic")}},
		{name: "key_func_long_identity_hashed", keyFunc: keyFn(long, nil), peer: "192.0.2.1:1", src: limit.KeySourceKeyFunc, id: hashed("k=" + long)},
		{name: "key_func_error_falls_to_trusted_header", opts: xff1, keyFunc: keyFn("", errors.New("x")), peer: "192.0.2.1:1", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},

		// WithTrustedHeader, X-Forwarded-For.
		{name: "xff_hops1_single_entry", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_hops1_spoofed_left_part_ignored", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, 1.1.1.1, 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_hops2_longer_chain", opts: xff2, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, 203.0.113.9, 198.51.100.7"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_hops2_exact_chain", opts: xff2, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9, 198.51.100.7"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_hops2_shorter_chain_discarded", opts: xff2, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 198.51.100.7"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},
		{name: "xff_absent_keys_on_peer", opts: xff1, peer: "10.0.0.2:1", src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},
		{name: "xff_empty_value_is_missing", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: , ,"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},
		{name: "xff_lines_form_one_list", opts: xff2, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, 203.0.113.9", "X-Forwarded-For: 198.51.100.7"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_hops1_reads_last_line", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6", "X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_empty_last_line_skipped", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9", "X-Forwarded-For: "}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_ipv4_with_port", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9:5678"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_bracketed_ipv6_with_port", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9 ,  [2001:db8::1]:443 "}, src: limit.KeySourceHeader, id: "r:2001:db8::"},
		{name: "xff_spaces_tabs_and_ports_hops2", opts: xff2, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: \t203.0.113.9:5678\t,  [2001:db8::1]:443 "}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_ipv4_mapped_entry_unmapped", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: ::ffff:203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_zone_in_entry_stripped", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: fe80::1%eth0"}, src: limit.KeySourceHeader, id: "r:fe80::"},
		{name: "xff_zone_on_ipv4_unusable", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9%eth0"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "xff_malformed_at_hop_unusable", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9, not-an-ip"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "xff_unknown_unusable", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: unknown"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "xff_unspecified_unusable", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 0.0.0.0"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "xff_port_out_of_range_unusable", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9:65536"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "xff_overlong_member_unusable", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9" + strings.Repeat(" ", 200)}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "xff_malformed_left_of_hop_not_read", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: \x00garbage\"" + strings.Repeat("x", 500) + ", 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_name_case_insensitive", opts: []limit.Option{limit.WithTrustedHeader("x-forwarded-for", 1)}, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_header_wins_with_empty_peer", opts: xff1, peer: "", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "xff_absent_and_empty_peer_fallback", opts: xff1, peer: "", src: limit.KeySourceFallback, id: "r:", issues: []limit.Issue{limit.Issue("trusted-header-missing"), limit.Issue("no-client-address")}},
		{name: "xff_ipv6_client_grouped_by_64", opts: xff1, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 2001:db8:1:2:3:4:5:6"}, src: limit.KeySourceHeader, id: "r:2001:db8:1:2::"},

		// WithTrustedHeader, RFC 7239 Forwarded.
		{name: "forwarded_quoted_ipv6_with_port", opts: fwd1, peer: "10.0.0.2:1", header: []string{`Forwarded: for="[2001:db8:cafe::17]:4711"`}, src: limit.KeySourceHeader, id: "r:2001:db8:cafe::"},
		{name: "forwarded_hops2_mixed_parameters", opts: fwd2, peer: "10.0.0.2:1", header: []string{"Forwarded: for=6.6.6.6, for=203.0.113.9;proto=https, by=10.0.0.1;for=198.51.100.7"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_parameter_name_case_insensitive", opts: fwd1, peer: "10.0.0.2:1", header: []string{"Forwarded: For=203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_quoted_ipv4_with_port", opts: fwd1, peer: "10.0.0.2:1", header: []string{`Forwarded: for="203.0.113.9:47011"`}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_ipv4_mapped_unmapped", opts: fwd1, peer: "10.0.0.2:1", header: []string{`Forwarded: for="[::ffff:203.0.113.9]:80"`}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_obfuscated_port_accepted", opts: fwd1, peer: "10.0.0.2:1", header: []string{`Forwarded: for="203.0.113.9:_p1"`}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_unknown_unusable", opts: fwd1, peer: "10.0.0.2:1", header: []string{"Forwarded: for=unknown"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "forwarded_obfuscated_identifier_unusable", opts: fwd1, peer: "10.0.0.2:1", header: []string{"Forwarded: for=_hidden"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "forwarded_element_without_for_unusable", opts: fwd1, peer: "10.0.0.2:1", header: []string{"Forwarded: proto=https;by=203.0.113.9"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "forwarded_duplicate_for_unusable", opts: fwd1, peer: "10.0.0.2:1", header: []string{"Forwarded: for=1.1.1.1;for=203.0.113.9"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "forwarded_unterminated_quote_unusable", opts: fwd1, peer: "10.0.0.2:1", header: []string{`Forwarded: for="203.0.113.9`}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "forwarded_quoted_comma_is_not_a_separator", opts: fwd2, peer: "10.0.0.2:1", header: []string{`Forwarded: for=203.0.113.9;host="a,b", for=198.51.100.7`}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_escaped_quote_inside_quoted_string", opts: fwd2, peer: "10.0.0.2:1", header: []string{`Forwarded: for=203.0.113.9;host="a\",b", for=198.51.100.7`}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_lines_form_one_list", opts: fwd2, peer: "10.0.0.2:1", header: []string{"Forwarded: for=6.6.6.6, for=203.0.113.9", "Forwarded: for=198.51.100.7"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "forwarded_shorter_chain_discarded", opts: fwd2, peer: "10.0.0.2:1", header: []string{"Forwarded: for=198.51.100.7"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},
		{name: "forwarded_unquoted_ipv6_accepted", opts: fwd1, peer: "10.0.0.2:1", header: []string{"Forwarded: for=2001:db8::1"}, src: limit.KeySourceHeader, id: "r:2001:db8::"},

		// WithTrustedHeader, single-value headers.
		{name: "x_real_ip_trusted", opts: realIP, peer: "10.0.0.2:1", header: []string{"X-Real-IP: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cf_connecting_ip_trusted_ipv6", opts: []limit.Option{limit.WithTrustedHeader("CF-Connecting-IP", 1)}, peer: "10.0.0.2:1", header: []string{"CF-Connecting-IP: 2001:db8:9::5"}, src: limit.KeySourceHeader, id: "r:2001:db8:9::"},
		{name: "true_client_ip_two_lines_unusable", opts: []limit.Option{limit.WithTrustedHeader("True-Client-IP", 1)}, peer: "10.0.0.2:1", header: []string{"True-Client-IP: 6.6.6.6", "True-Client-IP: 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "x_real_ip_list_unusable", opts: realIP, peer: "10.0.0.2:1", header: []string{"X-Real-IP: 6.6.6.6, 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "x_real_ip_absent_missing", opts: realIP, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},

		// WithTrustedProxies: walk X-Forwarded-For only from a trusted peer.
		{name: "cidr_untrusted_peer_header_ignored", opts: cidr, peer: "198.51.100.7:1", header: []string{"X-Forwarded-For: 6.6.6.6"}, src: limit.KeySourceSocket, id: "r:198.51.100.7"},
		{name: "cidr_trusted_peer_one_hop", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cidr_mixed_trusted_and_untrusted_hops", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.1.1.1, 192.168.1.1"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cidr_entirely_trusted_chain_leftmost", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 10.9.9.9, 192.168.4.4"}, src: limit.KeySourceHeader, id: "r:10.9.9.9"},
		{name: "cidr_malformed_ends_at_nearest_trusted_hop", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, garbage, 10.1.1.1"}, src: limit.KeySourceHeader, id: "r:10.1.1.1", issues: unusable},
		{name: "cidr_malformed_rightmost_ends_at_peer", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, garbage"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: unusable},
		{name: "cidr_unknown_ends_at_nearest_trusted_hop", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: unknown, 192.168.1.1"}, src: limit.KeySourceHeader, id: "r:192.168.1.1", issues: unusable},
		{name: "cidr_absent_header_keys_on_peer", opts: cidr, peer: "10.0.0.2:1", src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},
		{name: "cidr_ipv4_mapped_peer_trusted", opts: cidr, peer: "[::ffff:10.0.0.2]:80", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cidr_ipv4_mapped_hop_trusted", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 203.0.113.9, ::ffff:10.1.1.1"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cidr_zoned_peer_trusted", opts: cidr, peer: "[fe80::1%eth0]:80", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cidr_lines_form_one_list", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6", "X-Forwarded-For: 203.0.113.9", "X-Forwarded-For: 10.1.1.1"}, src: limit.KeySourceHeader, id: "r:203.0.113.9"},
		{name: "cidr_ipv6_client_grouped", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: [2001:db8:1:2::99]:443"}, src: limit.KeySourceHeader, id: "r:2001:db8:1:2::"},
		{name: "cidr_walk_longer_than_max_ends_at_last_trusted_hop", opts: cidr, peer: "10.0.0.2:1", header: []string{"X-Forwarded-For: 6.6.6.6, " + strings.Join(chain20, ", ")}, src: limit.KeySourceHeader, id: "r:" + chain20[len(chain20)-16], issues: unusable},
		{name: "cidr_unknown_peer_fallback", opts: cidr, peer: "", header: []string{"X-Forwarded-For: 203.0.113.9"}, src: limit.KeySourceFallback, id: "r:", issues: noAddr},
		{name: "cidr_forwarded_header_not_read", opts: cidr, peer: "10.0.0.2:1", header: []string{"Forwarded: for=6.6.6.6"}, src: limit.KeySourceSocket, id: "r:10.0.0.2", issues: miss},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, id, issues := deriveIdentity(t, limit.Policy{KeyFunc: tc.keyFunc}, tc.opts, tc.peer, headerOf(tc.header...))
			if src != tc.src || id != tc.id {
				t.Errorf("got %s %q, want %s %q", src, id, tc.src, tc.id)
			}
			if !slices.Equal(issues, tc.issues) {
				t.Errorf("issues %v, want %v", issues, tc.issues)
			}
		})
	}
}

// TestMappedAndPlainPeerShareBucket: 192.0.2.1:40001 and
// [::ffff:192.0.2.1]:40003 draw on one allowance through Check.
func TestMappedAndPlainPeerShareBucket(t *testing.T) {
	t.Parallel()
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2})
	ctx := t.Context()
	for i, peer := range []string{"192.0.2.1:40001", "[::ffff:192.0.2.1]:40003", "192.0.2.1:40002"} {
		resp := check(l, ctx, limit.Request{Peer: peer})
		if want := i < 2; resp.Decision.Allowed != want {
			t.Fatalf("request %d from %s: allowed %v, want %v", i, peer, resp.Decision.Allowed, want)
		}
		if resp.Decision.KeySource != limit.KeySourceSocket {
			t.Fatalf("KeySource %s, want socket", resp.Decision.KeySource)
		}
	}
}

// TestIPv6RotationThroughCheck: addresses inside one /64 share one
// allowance; the next /64 has its own.
func TestIPv6RotationThroughCheck(t *testing.T) {
	t.Parallel()
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 3})
	ctx := t.Context()
	for i := range 5 {
		peer := "[2001:db8:0:1::" + string(rune('a'+i)) + "]:443"
		if got, want := check(l, ctx, limit.Request{Peer: peer}).Decision.Allowed, i < 3; got != want {
			t.Fatalf("rotation %d (%s): allowed %v, want %v", i, peer, got, want)
		}
	}
	if !check(l, ctx, limit.Request{Peer: "[2001:db8:0:2::a]:443"}).Decision.Allowed {
		t.Fatal("the next /64 was limited with the first")
	}
}

// TestFallbackBucketCap: requests with no identity share one bucket at
// max(1, Limit/divisor), and the Decision says so.
func TestFallbackBucketCap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		limit   int64
		opts    []limit.Option
		allowed int
	}{
		{"default_divisor", 50, nil, 5},
		{"divisor_4", 20, []limit.Option{limit.WithFallbackDivisor(4)}, 5},
		{"never_below_one", 5, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &limittest.Recorder{}
			l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: tc.limit}, append(tc.opts, limit.WithObserver(obs))...)
			n := 0
			for range tc.allowed + 3 {
				d := check(l, t.Context(), limit.Request{Peer: ""}).Decision
				if d.KeySource != limit.KeySourceFallback {
					t.Fatalf("KeySource %s, want fallback", d.KeySource)
				}
				if d.Limit != int64(tc.allowed) {
					t.Fatalf("Decision.Limit %d, want %d", d.Limit, tc.allowed)
				}
				if d.Allowed {
					n++
				}
			}
			if n != tc.allowed {
				t.Fatalf("%d allowed, want %d", n, tc.allowed)
			}
			if got := obs.Issues(limit.Issue("no-client-address")); got != tc.allowed+3 {
				t.Fatalf("%d no-client-address events, want one per request (%d)", got, tc.allowed+3)
			}
		})
	}
}

// FuzzNoTrustIgnoresHeaders: with nothing trusted, no header of any name or
// content changes the identity of a request.
func FuzzNoTrustIgnoresHeaders(f *testing.F) {
	f.Add("X-Forwarded-For", "203.0.113.9", "192.0.2.1:40001")
	f.Add("Forwarded", `for="[2001:db8::1]:443"`, "[2001:db8::2]:1")
	f.Add("X-Real-IP", "203.0.113.9", "")
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{})
	f.Fuzz(func(t *testing.T, name, raw, peer string) {
		lines := strings.Split(raw, "\n")
		h := http.Header{name: lines, http.CanonicalHeaderKey(name): lines}
		s1, id1 := limit.Identify(l, limit.Request{Peer: peer})
		s2, id2 := limit.Identify(l, limit.Request{Peer: peer, Header: h})
		if s1 != s2 || id1 != id2 {
			t.Fatalf("a %q header changed the key: %s %q vs %s %q", name, s1, id1, s2, id2)
		}
	})
}

// BenchmarkCheckIdentity measures a whole allowed decision (in-process test
// store) per identity configuration, short and 1 MB headers included.
func BenchmarkCheckIdentity(b *testing.B) {
	cases := []limit.BenchHeader{
		{Name: "no_trust/spoofed_xff_ignored", Hdr: http.Header{"X-Forwarded-For": {"203.0.113.9"}}},
	}
	cases = append(cases, limit.BenchHeaders()...)
	for _, bc := range cases {
		b.Run(bc.Name, func(b *testing.B) {
			now := time.UnixMilli(epochMS) // a fixed clock: the store costs as little as main's did
			l := limittest.MustNew(limittest.NewStore(func() time.Time { return now }), limit.Policy{Limit: 1 << 30, Window: 1e9}, bc.Opt)
			r := limit.Request{Peer: "10.0.0.2:40001", Header: bc.Hdr}
			ctx := context.Background()
			w := limittest.Discard
			b.ReportAllocs()
			for b.Loop() {
				if !l.Check(ctx, r, w).Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

func TestIdentityChain(t *testing.T) {
	store := storeAt(0)
	keyFunc := func(r limit.Request) (string, error) {
		switch r.Path {
		case "/user":
			return "user-1", nil
		case "/error":
			return "ignored", errors.New("no user")
		case "/panic":
			panic("boom")
		}
		return "  ", nil
	}
	l := limittest.MustNew(store, limit.Policy{Limit: 20, KeyFunc: keyFunc})
	tests := []struct {
		name, path, peer string
		want             limit.KeySource
		limit            int64
	}{
		{"key_func", "/user", "192.0.2.1:1", limit.KeySourceKeyFunc, 20},
		{"key_func_error_falls_through", "/error", "192.0.2.1:1", limit.KeySourceSocket, 20},
		{"key_func_blank_falls_through", "/blank", "192.0.2.1:1", limit.KeySourceSocket, 20},
		{"key_func_panic_falls_through", "/panic", "192.0.2.1:1", limit.KeySourceSocket, 20},
		{"no_peer_is_fallback", "/blank", "", limit.KeySourceFallback, 2},
		{"garbage_peer_is_fallback", "/blank", "not-an-ip", limit.KeySourceFallback, 2},
		{"unspecified_peer_is_fallback", "/blank", "0.0.0.0:1", limit.KeySourceFallback, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := check(l, context.Background(), limit.Request{Path: tt.path, Peer: tt.peer}).Decision
			if d.KeySource != tt.want || d.Limit != tt.limit {
				t.Fatalf("source %s limit %d, want %s %d", d.KeySource, d.Limit, tt.want, tt.limit)
			}
		})
	}
}

// The tests from here to the end of the file run the identity chain over
// real sockets: a plain net/http server that calls the engine the way every
// net/http adapter does, and clients that connect from distinct loopback
// addresses or over a Unix socket.

// engineHandler is the smallest adapter: the engine's own net/http handler
// (Peer from r.RemoteAddr, Header from r.Header) around an "ok" handler.
func engineHandler(l *limit.Limiter) http.Handler {
	return l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), nil, nil)
}

// serve runs h on ln until the test ends.
func serve(t *testing.T, ln net.Listener, h http.Handler) {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
}

// clientFrom returns an HTTP client whose connections use dial.
func clientFrom(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: dial}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// get sends GET url with the given header lines and returns the status.
func get(t *testing.T, c *http.Client, url string, header ...string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := headerOf(header...); h != nil {
		req.Header = h
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestSocketFallbackBucketCap: behind a Unix socket the server sees no client
// address at all (r.RemoteAddr is "@" or ""), so every request draws on the
// one shared fallback bucket at Limit/10, reported as no-client-address;
// the same policy over TCP keys each client on its address at the full Limit.
func TestSocketFallbackBucketCap(t *testing.T) {
	t.Parallel()
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 20, Window: time.Hour}, limit.WithObserver(obs))

	dir, err := os.MkdirTemp("", "qg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen unix: %v", err)
	}
	serve(t, uln, engineHandler(l))
	var d net.Dialer
	unix := clientFrom(t, func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) })
	other := clientFrom(t, func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) })

	var got []int
	for _, c := range []*http.Client{unix, other, unix, other} {
		got = append(got, get(t, c, "http://unix/v1/notes/1"))
	}
	if want := []int{200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses over the Unix socket %v, want %v (fallback cap max(1, 20/10) = 2, shared by all clients)", got, want)
	}
	if n := obs.Issues(limit.Issue("no-client-address")); n != 4 {
		t.Fatalf("%d no-client-address events, want 4", n)
	}
	checkKeySources(t, obs, limit.KeySourceFallback)

	// The same limiter over TCP: 127.0.0.2 gets its own bucket at the full 20.
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, tln, engineHandler(l))
	c := limittest.ClientFrom("127.0.0.2")
	t.Cleanup(c.CloseIdleConnections)
	for i := range 5 {
		if s := get(t, c, "http://"+tln.Addr().String()+"/"); s != 200 {
			t.Fatalf("TCP request %d from 127.0.0.2: status %d, want 200", i, s)
		}
	}
	if n := obs.Issues(limit.Issue("no-client-address")); n != 4 {
		t.Fatalf("TCP requests reported no-client-address (%d events)", n)
	}
}

// TestSocketTrustedHeaderAbsentKeysOnPeer: with X-Forwarded-For trusted but
// absent, each request counts trusted-header-missing and is keyed on its
// socket peer, so clients on distinct addresses keep distinct allowances; a
// request carrying the header is keyed on it.
func TestSocketTrustedHeaderAbsentKeysOnPeer(t *testing.T) {
	t.Parallel()
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Hour}, limit.WithTrustedHeader("X-Forwarded-For", 1), limit.WithObserver(obs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, engineHandler(l))
	url := "http://" + ln.Addr().String() + "/v1/notes/1"
	a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
	t.Cleanup(a.CloseIdleConnections)
	t.Cleanup(b.CloseIdleConnections)

	var got []int
	for _, c := range []*http.Client{a, b, a, b, a, b} {
		got = append(got, get(t, c, url))
	}
	if want := []int{200, 200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v: each peer has its own bucket of 2", got, want)
	}
	if n := obs.Issues(limit.Issue("trusted-header-missing")); n != 6 {
		t.Fatalf("%d trusted-header-missing events, want one per request (6)", n)
	}
	checkKeySources(t, obs, limit.KeySourceSocket)

	// 127.0.0.2 is exhausted, but a request from it carrying the trusted
	// header is keyed on the header's address.
	if s := get(t, a, url, "X-Forwarded-For: 203.0.113.9"); s != 200 {
		t.Fatalf("request with the trusted header: status %d, want 200", s)
	}
	if ks := keySources(obs); ks[len(ks)-1] != limit.KeySourceHeader {
		t.Fatalf("KeySource %s, want header", ks[len(ks)-1])
	}
	if n := obs.Issues(limit.Issue("trusted-header-missing")); n != 6 {
		t.Fatalf("the request with the header was reported missing (%d events)", n)
	}
}
