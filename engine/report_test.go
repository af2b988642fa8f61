package limit_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/quotagate/quotagate/engine/limitstore"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// TestObserverEventsExactlyOnce pins the events of one Check or Consume per
// situation: one decision per call, one issue per issue met, one store error
// per failed store call and one duration per store call, nothing else.
func TestObserverEventsExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := limit.Request{Route: "/v1/notes/{id}", Method: "GET", Path: "/v1/notes/7", Peer: "192.0.2.1:5000"}
	tests := []struct {
		name   string
		policy limit.Policy
		store  func() limitstore.Store
		local  func() limitstore.Store
		run    func(l *limit.Limiter) // nil: one Check of req
		want   []string
	}{
		{
			name:   "allowed",
			policy: limit.Policy{Limit: 2},
			want:   []string{"duration custom|take", "decision 2p60|/v1/notes/{id}|allowed|socket"},
		},
		{
			name:   "limited",
			policy: limit.Policy{Limit: 1},
			run: func(l *limit.Limiter) {
				check(l, ctx, req)
				check(l, ctx, req)
			},
			want: []string{
				"duration custom|take", "decision 1p60|/v1/notes/{id}|allowed|socket",
				"duration custom|take", "decision 1p60|/v1/notes/{id}|limited|socket",
			},
		},
		{
			name:   "named_store",
			policy: limit.Policy{Limit: 2},
			store:  func() limitstore.Store { s := limittest.NewStore(nil); s.Info.Name = "memory"; return s },
			want:   []string{"duration memory|take", "decision 2p60|/v1/notes/{id}|allowed|socket"},
		},
		{
			name:   "no_client_address",
			policy: limit.Policy{Limit: 20},
			run:    func(l *limit.Limiter) { check(l, ctx, limit.Request{Route: "/a"}) },
			want: []string{
				"issue 20p60|no-client-address", "duration custom|take",
				"decision 20p60|/a|allowed|fallback",
			},
		},
		{
			name:   "per_route_without_route",
			policy: limit.Policy{Limit: 2, Scope: limit.PerRoute},
			run:    func(l *limit.Limiter) { check(l, ctx, limit.Request{Peer: "192.0.2.1"}) },
			want: []string{
				"issue 2p60|route-unknown", "duration custom|take",
				"decision 2p60||allowed|socket",
			},
		},
		{
			name:   "per_route",
			policy: limit.Policy{Limit: 2, Scope: limit.PerRoute},
			run:    func(l *limit.Limiter) { check(l, ctx, limit.Request{Route: "/v1/notes/:id", Peer: "192.0.2.1"}) },
			want:   []string{"duration custom|take", "decision /v1/notes/{id} 2p60|/v1/notes/:id|allowed|socket"},
		},
		{
			name:   "key_func_panic",
			policy: limit.Policy{Limit: 2, KeyFunc: func(limit.Request) (string, error) { panic("boom") }},
			want: []string{
				"issue 2p60|key-func-panic", "duration custom|take",
				"decision 2p60|/v1/notes/{id}|allowed|socket",
			},
		},
		{
			name:   "key_func",
			policy: limit.Policy{Limit: 2, KeyFunc: func(limit.Request) (string, error) { return "user-1", nil }},
			want:   []string{"duration custom|take", "decision 2p60|/v1/notes/{id}|allowed|key-func"},
		},
		{
			name:   "fail_open",
			policy: limit.Policy{Limit: 2},
			store:  func() limitstore.Store { return limittest.FailingStore{Err: errBackend} },
			want: []string{
				"duration custom|take", "store-error 2p60|open",
				"decision 2p60|/v1/notes/{id}|degraded|socket",
			},
		},
		{
			name:   "fail_closed",
			policy: limit.Policy{Limit: 2, FailureMode: limit.FailClosed},
			store:  func() limitstore.Store { return limittest.FailingStore{Err: errBackend} },
			want: []string{
				"duration custom|take", "store-error 2p60|closed",
				"decision 2p60|/v1/notes/{id}|limited|socket",
			},
		},
		{
			name:   "store_panic",
			policy: limit.Policy{Limit: 2},
			store:  func() limitstore.Store { return panickingStore },
			want: []string{
				"duration custom|take", "store-error 2p60|open",
				"decision 2p60|/v1/notes/{id}|degraded|socket",
			},
		},
		{
			name:   "fail_local",
			policy: limit.Policy{Limit: 2, FailureMode: limit.FailLocal},
			store:  func() limitstore.Store { return limittest.FailingStore{Err: errBackend} },
			local:  func() limitstore.Store { return limittest.NewStore(nil) },
			want: []string{
				"duration custom|take", "duration custom|take", "store-error 2p60|local",
				"decision 2p60|/v1/notes/{id}|degraded|socket",
			},
		},
		{
			name:   "fail_local_local_fails_too",
			policy: limit.Policy{Limit: 2, FailureMode: limit.FailLocal},
			store:  func() limitstore.Store { return limittest.FailingStore{Err: errBackend} },
			local:  func() limitstore.Store { return panickingStore },
			want: []string{
				"duration custom|take", "duration custom|take", "store-error 2p60|local",
				"store-error 2p60|local", "decision 2p60|/v1/notes/{id}|degraded|socket",
			},
		},
		{
			name:   "consume",
			policy: limit.Policy{Name: "mail", Limit: 2},
			run:    func(l *limit.Limiter) { l.Consume(ctx, "user-1") },
			want:   []string{"duration custom|take", "decision mail||allowed|consume"},
		},
		{
			name:   "consume_blank_identity",
			policy: limit.Policy{Name: "mail", Limit: 20},
			run:    func(l *limit.Limiter) { l.Consume(ctx, "") },
			want: []string{
				"issue mail|no-client-address", "duration custom|take",
				"decision mail||allowed|fallback",
			},
		},
		{
			name:   "consume_store_down",
			policy: limit.Policy{Name: "mail", Limit: 2},
			store:  func() limitstore.Store { return limittest.FailingStore{Err: errBackend} },
			run:    func(l *limit.Limiter) { l.Consume(ctx, "user-1") },
			want: []string{
				"duration custom|take", "store-error mail|open",
				"decision mail||degraded|consume",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var store limitstore.Store = limittest.NewStore(nil)
			if tt.store != nil {
				store = tt.store()
			}
			rec := &limittest.Recorder{}
			opts := []limit.Option{limit.WithObserver(rec)}
			if tt.local != nil {
				opts = append(opts, limit.WithLocalStore(tt.local()))
			}
			l, err := limit.New(store, tt.policy, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.run == nil {
				check(l, ctx, req)
			} else {
				tt.run(l)
			}
			if got := rec.Events(); !slices.Equal(got, tt.want) {
				t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// TestObserverAllocationFree: with a warm in-process store, Check and Consume
// allocate nothing on the allowed, limited, degraded and fallback paths, with
// or without an observer: emitting events costs no allocation.
func TestObserverAllocationFree(t *testing.T) {
	ctx := context.Background()
	w := limittest.NewWriter()
	do := func(l *limit.Limiter, r limit.Request) {
		w.Reset()
		l.Check(ctx, r, w)
	}
	peer := limit.Request{Route: "/a/{id}", Peer: "192.0.2.1:1"}
	// A fixed clock: the limited path's Retry-After (< 100 s) formats without
	// an allocation.
	ref := func() limitstore.Store { return storeAt(1_767_225_600_000) }
	cases := []struct {
		name  string
		store func() limitstore.Store
		p     limit.Policy
		run   func(l *limit.Limiter)
	}{
		{"allowed", ref, limit.Policy{Limit: 1_000_000_000}, func(l *limit.Limiter) { do(l, peer) }},
		{"limited", ref, limit.Policy{Limit: 1}, func(l *limit.Limiter) { do(l, peer) }},
		{"per_route", ref, limit.Policy{Limit: 1_000_000_000, Scope: limit.PerRoute}, func(l *limit.Limiter) { do(l, peer) }},
		{"fallback_issue", ref, limit.Policy{Limit: 1_000_000_000}, func(l *limit.Limiter) { do(l, limit.Request{Route: "/a/{id}"}) }},
		{"consume", ref, limit.Policy{Limit: 1_000_000_000}, func(l *limit.Limiter) { l.Consume(ctx, "user-1") }},
		{"degraded", func() limitstore.Store { return limittest.FailingStore{Err: errBackend} }, limit.Policy{Limit: 10}, func(l *limit.Limiter) { do(l, peer) }},
	}
	for _, tc := range cases {
		for _, observed := range []bool{true, false} {
			t.Run(tc.name+map[bool]string{true: "/observer", false: "/no-observer"}[observed], func(t *testing.T) {
				rec := &limittest.Recorder{}
				rec.Reserve(20_000) // room for every event of the guard's runs
				opts := []limit.Option{limit.WithLogger(slog.New(slog.DiscardHandler))}
				if observed {
					opts = append(opts, limit.WithObserver(rec))
				}
				l := limittest.MustNew(tc.store(), tc.p, opts...)
				do(l, peer) // warm: first key write, route cache
				assertNoAllocs(t, l, func() { tc.run(l) })
				if observed && (len(rec.Decisions()) == 0 || rec.Durations() == 0) {
					t.Errorf("observer saw no events: %d decisions, %d durations", len(rec.Decisions()), rec.Durations())
				}
			})
		}
	}
}

// TestLogRateLimits: store failures log at most once per 10 s, each issue kind
// at most once per 10 minutes, whatever the request rate.
func TestLogRateLimits(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	advance := func(d time.Duration) { now.Add(int64(d)) }

	// In-process: no circuit breaker, so every call fails and meets the gate.
	failing := limittest.FailingStore{Err: errBackend}
	l := limittest.MustNew(failing, limit.Policy{Limit: 10, Scope: limit.PerRoute}, limit.WithLogger(logger))
	limit.SetLogClock(l, func() time.Time { return time.Unix(0, now.Load()) })
	ctx := context.Background()
	lines := func(substr string) int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(buf.String(), substr)
	}

	burst := func() {
		for range 1000 {
			check(l, ctx, limit.Request{})                               // route-unknown + no-client-address + store failure
			check(l, ctx, limit.Request{Route: "/a", Peer: "192.0.2.9"}) // store failure only
		}
	}
	burst()
	if s, r, n := lines("store call failed"), lines("quotagate: route-unknown"), lines("quotagate: no-client-address"); s != 1 || r != 1 || n != 1 {
		t.Fatalf("after 2000 failing requests: %d store lines, %d route-unknown, %d no-client-address; want 1 each", s, r, n)
	}
	advance(10*time.Second - time.Nanosecond)
	burst()
	if s := lines("store call failed"); s != 1 {
		t.Fatalf("just under 10 s later: %d store lines, want still 1", s)
	}
	advance(time.Nanosecond)
	burst()
	if s, r := lines("store call failed"), lines("quotagate: route-unknown"); s != 2 || r != 1 {
		t.Fatalf("10 s later: %d store lines, %d route-unknown; want 2 and 1", s, r)
	}
	advance(10*time.Minute - 10*time.Second)
	burst()
	if s, r, n := lines("store call failed"), lines("quotagate: route-unknown"), lines("quotagate: no-client-address"); s != 3 || r != 2 || n != 2 {
		t.Fatalf("10 min after the first: %d store lines, %d route-unknown, %d no-client-address; want 3, 2, 2", s, r, n)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (lw lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

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
		opts   []limit.Option
		policy limit.Policy
		header http.Header
	}{
		{"unusable_xff_member", []limit.Option{limit.WithTrustedHeader("X-Forwarded-For", 1)}, limit.Policy{}, headerOf("X-Forwarded-For: " + evil)},
		{"unusable_forwarded_element", []limit.Option{limit.WithTrustedHeader("Forwarded", 1)}, limit.Policy{}, headerOf("Forwarded: for=\"" + evil + "\"")},
		{"unusable_single_value", []limit.Option{limit.WithTrustedHeader("X-Real-IP", 1)}, limit.Policy{}, headerOf("X-Real-IP: " + evil)},
		{"unusable_proxy_walk", []limit.Option{limit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))}, limit.Policy{}, headerOf("X-Forwarded-For: " + evil + strings.Repeat("x", 90))},
		{"key_func_panic", nil, limit.Policy{KeyFunc: func(limit.Request) (string, error) { panic(evil) }}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newRawHandler()
			l := limittest.MustNew(limittest.NewStore(nil), tc.policy, append(tc.opts, limit.WithLogger(slog.New(h)))...)
			check(l, t.Context(), limit.Request{Peer: "10.0.0.2:1", Header: tc.header})
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
		obs := &limittest.Recorder{}
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{}, limit.WithTrustedHeader("X-Forwarded-For", 2), limit.WithLogger(slog.New(h)), limit.WithObserver(obs))
		for range 3 {
			check(l, t.Context(), limit.Request{Peer: "10.0.0.2:1", Header: headerOf("X-Forwarded-For: 203.0.113.9")})
			check(l, t.Context(), limit.Request{Peer: "10.0.0.2:1", Header: headerOf("X-Forwarded-For: junk, 10.0.0.3")})
		}
		if m, u := obs.Issues(limit.Issue("trusted-header-missing")), obs.Issues(limit.Issue("trusted-header-unusable")); m != 3 || u != 3 {
			t.Fatalf("events: %d missing, %d unusable; want 3 each", m, u)
		}
		lines := h.lines()
		if len(lines) != 2 || !strings.Contains(lines[0], "trusted-header-missing") || !strings.Contains(lines[1], "trusted-header-unusable") {
			t.Fatalf("want one line per kind, got %q", lines)
		}
		if !strings.Contains(lines[0], "header=X-Forwarded-For") || !strings.Contains(lines[0], "hops=2") || !strings.Contains(lines[1], "entry=junk") {
			t.Fatalf("log lines lack the header, hops or entry: %q", lines)
		}
		checkKeySources(t, obs, limit.KeySourceSocket)
	})
	t.Run("spoofed_headers_without_trust_report_nothing", func(t *testing.T) {
		t.Parallel()
		h := newRawHandler()
		obs := &limittest.Recorder{}
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{}, limit.WithLogger(slog.New(h)), limit.WithObserver(obs))
		hdr := headerOf("X-Forwarded-For: junk", "Forwarded: for=unknown", "X-Real-IP: ", "True-Client-IP: 1.2.3.4, 5.6.7.8")
		for range 5 {
			check(l, t.Context(), limit.Request{Peer: "192.0.2.1:1", Header: hdr})
		}
		if n := len(issuesOf(obs)); n != 0 || h.buf.Len() != 0 {
			t.Fatalf("reported %v, logged %q", issuesOf(obs), h.buf.String())
		}
	})
	t.Run("untrusted_peer_reports_nothing", func(t *testing.T) {
		t.Parallel()
		obs := &limittest.Recorder{}
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{}, limit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")), limit.WithObserver(obs))
		for _, hdr := range []http.Header{nil, headerOf("X-Forwarded-For: junk")} {
			check(l, t.Context(), limit.Request{Peer: "192.0.2.1:1", Header: hdr})
		}
		if n := len(issuesOf(obs)); n != 0 {
			t.Fatalf("reported %v", issuesOf(obs))
		}
	})
}
