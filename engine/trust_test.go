package limit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
)

// rawHandler is a slog.Handler that writes attribute values verbatim, with no
// quoting or escaping of its own, so that a test sees exactly the bytes the
// engine handed to the logger (a custom handler in production might do the
// same).
type rawHandler struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func newRawHandler() rawHandler { return rawHandler{mu: new(sync.Mutex), buf: new(bytes.Buffer)} }

func (h rawHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h rawHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h rawHandler) WithGroup(string) slog.Handler            { return h }
func (h rawHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(h.buf, " %s=%s", a.Key, a.Value.String())
		return true
	})
	h.buf.WriteByte('\n')
	return nil
}

func (h rawHandler) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Split(strings.TrimSuffix(h.buf.String(), "\n"), "\n")
}

// TestLogLinesCarryNoControlCharacters: identity text from a header or a
// KeyFunc panic reaches the log sanitised: no C0/C1 control, DEL, line
// separator or bidirectional override, and bounded in length.
func TestLogLinesCarryNoControlCharacters(t *testing.T) {
	t.Parallel()
	evil := "\x1b[31mevil\rforged line\u2028\u202e\x7f\xc2\x85\xff"
	cases := []struct {
		name   string
		opts   []Option
		policy Policy
		header http.Header
	}{
		{"unusable_xff_member", []Option{WithTrustedHeader("X-Forwarded-For", 1)}, Policy{}, headerOf("X-Forwarded-For: " + evil)},
		{"unusable_forwarded_element", []Option{WithTrustedHeader("Forwarded", 1)}, Policy{}, headerOf("Forwarded: for=\"" + evil + "\"")},
		{"unusable_single_value", []Option{WithTrustedHeader("X-Real-IP", 1)}, Policy{}, headerOf("X-Real-IP: " + evil)},
		{"unusable_proxy_walk", []Option{WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))}, Policy{}, headerOf("X-Forwarded-For: " + evil + strings.Repeat("x", 90))},
		{"key_func_panic", nil, Policy{KeyFunc: func(Request) (string, error) { panic(evil) }}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newRawHandler()
			l := MustNew(newIDStore(), tc.policy, append(tc.opts, WithLogger(slog.New(h)))...)
			l.Check(t.Context(), Request{Peer: "10.0.0.2:1", Header: tc.header})
			lines := h.lines()
			if len(lines) != 1 || lines[0] == "" {
				t.Fatalf("want one log line, got %q", lines)
			}
			for _, r := range lines[0] {
				if r == utf8.RuneError || !unicode.IsPrint(r) {
					t.Fatalf("log line carries %U: %q", r, lines[0])
				}
			}
			if !strings.Contains(lines[0], "evil") {
				t.Fatalf("the offending text is not quoted at all: %q", lines[0])
			}
		})
	}
}

// TestIssueReporting: every affected request emits an event; the log line
// comes at most once per kind per 10 minutes; a spoofed header with nothing
// trusted, or from an untrusted peer, reports nothing.
func TestIssueReporting(t *testing.T) {
	t.Parallel()
	t.Run("missing_and_unusable_logged_once_each", func(t *testing.T) {
		t.Parallel()
		h := newRawHandler()
		obs := &idObserver{}
		l := MustNew(newIDStore(), Policy{}, WithTrustedHeader("X-Forwarded-For", 2), WithLogger(slog.New(h)), WithObserver(obs))
		for range 3 {
			l.Check(t.Context(), Request{Peer: "10.0.0.2:1", Header: headerOf("X-Forwarded-For: 203.0.113.9")})
			l.Check(t.Context(), Request{Peer: "10.0.0.2:1", Header: headerOf("X-Forwarded-For: junk, 10.0.0.3")})
		}
		if m, u := obs.issueCount(IssueTrustedHeaderMissing), obs.issueCount(IssueTrustedHeaderUnusable); m != 3 || u != 3 {
			t.Fatalf("events: %d missing, %d unusable; want 3 each", m, u)
		}
		lines := h.lines()
		if len(lines) != 2 || !strings.Contains(lines[0], "trusted-header-missing") || !strings.Contains(lines[1], "trusted-header-unusable") {
			t.Fatalf("want one line per kind, got %q", lines)
		}
		if !strings.Contains(lines[0], "header=X-Forwarded-For") || !strings.Contains(lines[0], "hops=2") || !strings.Contains(lines[1], "entry=junk") {
			t.Fatalf("log lines lack the header, hops or entry: %q", lines)
		}
		for _, s := range obs.keySources() {
			if s != KeySourceSocket {
				t.Fatalf("KeySource %s, want socket", s)
			}
		}
	})
	t.Run("spoofed_headers_without_trust_report_nothing", func(t *testing.T) {
		t.Parallel()
		h := newRawHandler()
		obs := &idObserver{}
		l := MustNew(newIDStore(), Policy{}, WithLogger(slog.New(h)), WithObserver(obs))
		hdr := headerOf("X-Forwarded-For: junk", "Forwarded: for=unknown", "X-Real-IP: ", "True-Client-IP: 1.2.3.4, 5.6.7.8")
		for range 5 {
			l.Check(t.Context(), Request{Peer: "192.0.2.1:1", Header: hdr})
		}
		if len(obs.issues) != 0 || h.buf.Len() != 0 {
			t.Fatalf("reported %v, logged %q", obs.issues, h.buf.String())
		}
	})
	t.Run("untrusted_peer_reports_nothing", func(t *testing.T) {
		t.Parallel()
		obs := &idObserver{}
		l := MustNew(newIDStore(), Policy{}, WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")), WithObserver(obs))
		for _, hdr := range []http.Header{nil, headerOf("X-Forwarded-For: junk")} {
			l.Check(t.Context(), Request{Peer: "192.0.2.1:1", Header: hdr})
		}
		if len(obs.issues) != 0 {
			t.Fatalf("reported %v", obs.issues)
		}
	})
}

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
		{"proxies_walk_1mb_of_trusted_members", WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")), []string{strings.Repeat("10.1.1.1, ", (1<<20)/10) + "10.0.0.3"}, false, MaxTrustedHops, "r:10.1.1.1"},
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
			name := HeaderXForwardedFor
			if tc.rfc {
				name = HeaderForwarded
			}
			_, id, _ := deriveIdentity(t, Policy{}, []Option{tc.opt}, "10.0.0.2:1", http.Header{name: tc.lines})
			if id != tc.wantID {
				t.Fatalf("key %q, want %q", id, tc.wantID)
			}
		})
	}
}

// TestAllowedPathAllocations: deciding an allowed request allocates nothing
// with no trust configured, and nothing with any trust configuration either
// when the header is well-formed.
func TestAllowedPathAllocations(t *testing.T) {
	cidr := WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))
	cases := []struct {
		name string
		opts []Option
		peer string
		hdr  http.Header
		// raceAllocs: under -race, the SHA-256 call makes the address text
		// escape (one allocation); the count is checked without -race only.
		raceAllocs bool
	}{
		{"no_trust", nil, "192.0.2.1:40001", headerOf("X-Forwarded-For: 203.0.113.9"), false},
		{"no_trust_ipv6_zone", nil, "[fe80::1%eth0]:1", nil, false},
		{"no_trust_hash_keys", []Option{WithHashKeys(true)}, "192.0.2.1:40001", nil, true},
		{"xff_hops2", []Option{WithTrustedHeader("X-Forwarded-For", 2)}, "10.0.0.2:1", headerOf("X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.0.0.1"), false},
		{"forwarded_hops1", []Option{WithTrustedHeader("Forwarded", 1)}, "10.0.0.2:1", headerOf(`Forwarded: for="[2001:db8::1]:443";proto=https`), false},
		{"single_value", []Option{WithTrustedHeader("CF-Connecting-IP", 1)}, "10.0.0.2:1", headerOf("CF-Connecting-IP: 203.0.113.9"), false},
		{"proxies_walk", []Option{cidr}, "10.0.0.2:1", headerOf("X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.1.1.1"), false},
		{"proxies_untrusted_peer", []Option{cidr}, "192.0.2.1:1", headerOf("X-Forwarded-For: 203.0.113.9"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.raceAllocs && idRaceEnabled {
				t.Skip("SKIPPED under -race: the race detector's instrumentation makes the SHA-256 input escape; `go test -run TestAllowedPathAllocations` without -race checks this case")
			}
			l := MustNew(newIDStore(), Policy{Limit: 1 << 30, Window: 1000 * 1e6}, tc.opts...)
			r := Request{Peer: tc.peer, Header: tc.hdr}
			ctx := context.Background()
			l.Check(ctx, r) // creates the store entry
			if a := testing.AllocsPerRun(200, func() {
				if !l.Check(ctx, r).Decision.Allowed {
					t.Fatal("denied")
				}
			}); a != 0 {
				t.Fatalf("%v allocations per allowed request, want 0", a)
			}
		})
	}
}
