package limit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestSkipPaths(t *testing.T) {
	store := newMapStore(epochMS)
	obs := &tally{}
	l := mustNew(t, store, Policy{Limit: 1, SkipPaths: []string{"/health", "/metrics"}, Disclosure: DiscloseAlways}, WithObserver(obs))
	for i := 0; i < 5; i++ {
		for _, path := range []string{"/health", "/metrics"} {
			resp := l.Check(context.Background(), req("192.0.2.1:1", path))
			if resp.Denied() || !resp.Decision.Allowed || resp.Decision.Outcome != OutcomeSkipped || len(resp.Fields()) != 0 {
				t.Fatalf("%s: %+v, want skipped with no fields", path, resp)
			}
		}
	}
	if store.calls() != 0 || len(obs.events()) != 0 {
		t.Fatalf("skipped requests reached the store (%d) or the observer (%d)", store.calls(), len(obs.events()))
	}
	// Exact match only: neither a trailing slash nor a prefix is skipped.
	for _, path := range []string{"/health/", "/healthz", "/metrics/x", "/HEALTH"} {
		store.reset()
		if resp := l.Check(context.Background(), req("192.0.2.1:1", path)); resp.Decision.Outcome != OutcomeAllowed {
			t.Fatalf("%s: outcome %q, want it limited as usual", path, resp.Decision.Outcome)
		}
	}
	for _, bad := range []string{"", "health"} {
		_, err := New(store, Policy{SkipPaths: []string{"/ok", bad}})
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "SkipPaths[1]") {
			t.Fatalf("SkipPaths %q: err %v, want ErrInvalidPolicy naming SkipPaths[1]", bad, err)
		}
	}
}

func TestSkipPredicate(t *testing.T) {
	store := newMapStore(epochMS)
	obs := &tally{}
	var asked atomic.Int64
	l := mustNew(t, store, Policy{Limit: 1, SkipPaths: []string{"/health"}, Skip: func(r Request) bool {
		asked.Add(1)
		return r.Method == http.MethodOptions
	}}, WithObserver(obs))
	if !l.NeedsRoute() {
		t.Fatal("NeedsRoute is false although Skip receives the Request")
	}
	l.Check(context.Background(), req("192.0.2.1:1", "/health"))
	if asked.Load() != 0 {
		t.Fatal("Skip was asked about a path SkipPaths already skipped")
	}
	opt := req("192.0.2.1:1", "/x")
	opt.Method = http.MethodOptions
	for i := 0; i < 3; i++ {
		if resp := l.Check(context.Background(), opt); resp.Decision.Outcome != OutcomeSkipped {
			t.Fatalf("OPTIONS: outcome %q, want skipped", resp.Decision.Outcome)
		}
	}
	if store.calls() != 0 || len(obs.events()) != 0 {
		t.Fatal("skipped requests were counted or reported")
	}
	first := l.Check(context.Background(), req("192.0.2.1:1", "/x"))
	second := l.Check(context.Background(), req("192.0.2.1:1", "/x"))
	if first.Denied() || !second.Denied() {
		t.Fatal("GET requests were not limited")
	}
}

// A panicking Skip predicate counts as false: the request is limited as
// usual (a broken predicate never opens the limiter), the panic is reported
// on every request and logged once.
func TestSkipPanicLimitsAsUsual(t *testing.T) {
	store := newMapStore(epochMS)
	obs := &tally{}
	var logs logBuffer
	l := mustNew(t, store, Policy{Limit: 2, Skip: func(Request) bool { panic("skip bug") }}, WithObserver(obs), WithLogger(logs.logger()))
	var statuses []int
	for i := 0; i < 3; i++ {
		statuses = append(statuses, l.Check(context.Background(), req("192.0.2.1:1", "/health")).Status)
	}
	if statuses[0] != 0 || statuses[1] != 0 || statuses[2] != 429 {
		t.Fatalf("statuses %v, want the request limited as usual (0 0 429)", statuses)
	}
	if obs.issue(IssueSkipPanic) != 3 || store.calls() != 3 {
		t.Fatalf("skip-panic reported %d times, store called %d times; want 3 and 3", obs.issue(IssueSkipPanic), store.calls())
	}
	if n := logs.count("Skip panicked"); n != 1 || !strings.Contains(logs.String(), "skip bug") {
		t.Fatalf("logged %d times, want once with the panic value:\n%s", n, logs.String())
	}
}

func TestOnLimited(t *testing.T) {
	store := newMapStore(epochMS)
	var calls []Decision
	var reqs []Request
	l := mustNew(t, store, Policy{Name: "api", Limit: 2, OnLimited: func(ctx context.Context, r Request, d Decision) {
		if ctx.Value(ctxKey{}) != "v" {
			t.Error("OnLimited did not get the request's context")
		}
		calls = append(calls, d)
		reqs = append(reqs, r)
	}})
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	for i := 0; i < 4; i++ {
		l.Check(ctx, req("192.0.2.1:1", "/v1/x"))
	}
	if len(calls) != 2 {
		t.Fatalf("OnLimited called %d times for 2 denials", len(calls))
	}
	if d := calls[0]; d.Allowed || d.Outcome != OutcomeLimited || d.Bucket != "api" || d.RetryAfter <= 0 || reqs[0].Path != "/v1/x" || reqs[0].Peer != "192.0.2.1:1" {
		t.Fatalf("OnLimited got %+v, %+v", d, reqs[0])
	}
}

type ctxKey struct{}

// A panicking OnLimited changes nothing for the client: the same denial,
// never a 500; the panic is reported and logged once.
func TestOnLimitedPanicKeepsTheDenial(t *testing.T) {
	obs := &tally{}
	var logs logBuffer
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 1, OnLimited: func(context.Context, Request, Decision) { panic("hook bug") }},
		WithObserver(obs), WithLogger(logs.logger()))
	l.Check(context.Background(), req("192.0.2.1:1", "/"))
	for i := 0; i < 3; i++ {
		resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
		if resp.Status != 429 || string(resp.Body) != string(body429Default) || responseHeader(resp).Get("Retry-After") == "" {
			t.Fatalf("denial %d: %d %s", i, resp.Status, resp.Body)
		}
	}
	if obs.issue(IssueHookPanic) != 3 || logs.count("OnLimited panicked") != 1 {
		t.Fatalf("hook-panic %d times, logged %d times; want 3 and 1", obs.issue(IssueHookPanic), logs.count("OnLimited panicked"))
	}
}

var body429Default = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429}`)

func TestOnStoreError(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var got []error
			limitedCalls := 0
			l := mustNew(t, errStore, Policy{FailureMode: mode,
				OnStoreError: func(_ context.Context, r Request, err error) {
					if r.Path != "/x" {
						t.Errorf("OnStoreError got request %+v", r)
					}
					got = append(got, err)
				},
				OnLimited: func(_ context.Context, _ Request, d Decision) {
					limitedCalls++
					if !d.StoreFailed {
						t.Error("OnLimited on a FailClosed rejection without StoreFailed")
					}
				}})
			resp := l.Check(context.Background(), req("192.0.2.1:1", "/x"))
			if len(got) != 1 || !errors.Is(got[0], errBackend) {
				t.Fatalf("OnStoreError got %v", got)
			}
			if wantLimited := map[FailureMode]int{FailOpen: 0, FailClosed: 1}[mode]; limitedCalls != wantLimited {
				t.Fatalf("OnLimited called %d times, want %d", limitedCalls, wantLimited)
			}
			if !resp.Decision.StoreFailed {
				t.Fatal("Decision.StoreFailed is false")
			}
		})
	}
}

// A panicking OnStoreError leaves the failure mode in charge: FailOpen still
// admits, FailClosed still answers 503; never a 500.
func TestOnStoreErrorPanicKeepsTheFailureMode(t *testing.T) {
	for _, tc := range []struct {
		mode   FailureMode
		status int
	}{{FailOpen, 0}, {FailClosed, 503}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			obs := &tally{}
			var logs logBuffer
			l := mustNew(t, errStore, Policy{FailureMode: tc.mode, OnStoreError: func(context.Context, Request, error) { panic("hook bug") }},
				WithObserver(obs), WithLogger(logs.logger()))
			for i := 0; i < 2; i++ {
				if resp := l.Check(context.Background(), req("192.0.2.1:1", "/")); resp.Status != tc.status {
					t.Fatalf("status %d, want %d", resp.Status, tc.status)
				}
			}
			if obs.issue(IssueHookPanic) != 2 || obs.storeErrs != 2 || logs.count("OnStoreError panicked") != 1 {
				t.Fatalf("hook-panic %d, store errors %d, logged %d; want 2, 2, 1", obs.issue(IssueHookPanic), obs.storeErrs, logs.count("OnStoreError panicked"))
			}
		})
	}
}

// Consume has no HTTP request: hooks get an empty Request whose Native is a
// ConsumeCall with the identity and cost.
func TestConsumeHooks(t *testing.T) {
	var limited, failed []Request
	hooks := Policy{Limit: 2,
		OnLimited:    func(_ context.Context, r Request, _ Decision) { limited = append(limited, r) },
		OnStoreError: func(_ context.Context, r Request, _ error) { failed = append(failed, r) },
	}
	l := mustNew(t, newMapStore(epochMS), hooks)
	for i := 0; i < 3; i++ {
		l.ConsumeN(context.Background(), "user-42", 1)
	}
	if len(limited) != 1 || limited[0].Native != (ConsumeCall{Identity: "user-42", Cost: 1}) || limited[0].Path != "" || limited[0].Peer != "" {
		t.Fatalf("OnLimited from Consume got %+v", limited)
	}
	f := mustNew(t, errStore, hooks)
	if d, err := f.Consume(context.Background(), "user-7"); !errors.Is(err, errBackend) || !d.Allowed || !d.StoreFailed {
		t.Fatalf("Consume on a failing store: %+v, %v", d, err)
	}
	if len(failed) != 1 || failed[0].Native != (ConsumeCall{Identity: "user-7", Cost: 1}) {
		t.Fatalf("OnStoreError from Consume got %+v", failed)
	}
}

func TestDenyResponse(t *testing.T) {
	var got Decision
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 1, Disclosure: DiscloseOnLimit,
		DenyResponse: func(_ context.Context, r Request, d Decision) *Denial {
			got = d
			return &Denial{Status: 418, Header: http.Header{"Content-Type": {"text/plain"}, "X-Reason": {"slow", "down"}}, Body: []byte("slow down")}
		}})
	if first := l.Check(context.Background(), req("192.0.2.1:1", "/")); first.Denied() || got.Bucket != "" {
		t.Fatal("DenyResponse ran for an allowed request")
	}
	resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
	if got.Allowed || got.RetryAfter <= 0 {
		t.Fatalf("DenyResponse got %+v", got)
	}
	w := httptest.NewRecorder()
	resp.WriteDenial(w)
	h := w.Header()
	if w.Code != 418 || w.Body.String() != "slow down" || h.Get("Content-Type") != "text/plain" || strings.Join(h.Values("X-Reason"), ",") != "slow,down" {
		t.Fatalf("custom denial: %d %q %v", w.Code, w.Body, h)
	}
	// The engine's disclosure fields stay.
	if h.Get("Retry-After") == "" || h.Get("Ratelimit") == "" || h.Get("Cache-Control") != "no-store" || h.Get("Content-Length") != "9" {
		t.Fatalf("engine fields missing from the custom denial: %v", h)
	}
}

// Status 0 keeps the default status (429, or 503 on a FailClosed rejection)
// and the builder can tell the two apart by Decision.StoreFailed.
func TestDenyResponseDefaultStatus(t *testing.T) {
	build := func(_ context.Context, _ Request, d Decision) *Denial {
		msg := "quota"
		if d.StoreFailed {
			msg = "store"
		}
		return &Denial{Body: []byte(msg)}
	}
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 1, DenyResponse: build})
	l.Check(context.Background(), req("192.0.2.1:1", "/"))
	if resp := l.Check(context.Background(), req("192.0.2.1:1", "/")); resp.Status != 429 || string(resp.Body) != "quota" {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	closed := mustNew(t, errStore, Policy{FailureMode: FailClosed, DenyResponse: build})
	resp := closed.Check(context.Background(), req("192.0.2.1:1", "/"))
	if resp.Status != 503 || string(resp.Body) != "store" || responseHeader(resp).Get("Content-Type") != "" {
		t.Fatalf("%d %s %v", resp.Status, resp.Body, responseHeader(resp))
	}
}

// A DenyResponse that panics, returns nil or returns a status outside
// 400-599 yields the default denial, reported each time and logged once per
// kind.
func TestDenyResponseFallsBackToTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(context.Context, Request, Decision) *Denial
		log   string
	}{
		{"panic", func(context.Context, Request, Decision) *Denial { panic("builder bug") }, "DenyResponse panicked"},
		{"panic_nil", func(context.Context, Request, Decision) *Denial { panic(nil) }, "DenyResponse panicked"},
		{"nil", func(context.Context, Request, Decision) *Denial { return nil }, "DenyResponse returned nil"},
		{"status_200", func(context.Context, Request, Decision) *Denial { return &Denial{Status: 200, Body: []byte("ok")} }, "Status 200, outside 400-599"},
		{"status_600", func(context.Context, Request, Decision) *Denial { return &Denial{Status: 600} }, "Status 600, outside 400-599"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &tally{}
			var logs logBuffer
			l := mustNew(t, newMapStore(epochMS), Policy{Limit: 1, DenyResponse: tc.build}, WithObserver(obs), WithLogger(logs.logger()))
			l.Check(context.Background(), req("192.0.2.1:1", "/"))
			for i := 0; i < 2; i++ {
				resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
				h := responseHeader(resp)
				if resp.Status != 429 || string(resp.Body) != string(body429Default) || h.Get("Content-Type") != ProblemJSON || h.Get("Retry-After") == "" || resp.DenialHeader != nil {
					t.Fatalf("fallback %d: %d %s %v", i, resp.Status, resp.Body, h)
				}
			}
			if obs.issue(IssueDenyResponseFallback) != 2 || logs.count(tc.log) != 1 {
				t.Fatalf("reported %d times, logged %d times (%q); want 2 and 1:\n%s", obs.issue(IssueDenyResponseFallback), logs.count(tc.log), tc.log, logs.String())
			}
		})
	}
}

// DenialHeader fields replace engine fields of the same name.
func TestDenialHeaderReplacesEngineFields(t *testing.T) {
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 1, DenyResponse: func(context.Context, Request, Decision) *Denial {
		return &Denial{Header: http.Header{"Retry-After": {"3600"}}}
	}})
	l.Check(context.Background(), req("192.0.2.1:1", "/"))
	h := responseHeader(l.Check(context.Background(), req("192.0.2.1:1", "/")))
	if got := h.Values("Retry-After"); len(got) != 1 || got[0] != "3600" {
		t.Fatalf("Retry-After %q, want the builder's single value", got)
	}
}

func TestNeedsRoute(t *testing.T) {
	s := newMapStore(epochMS)
	for _, tc := range []struct {
		name string
		p    Policy
		want bool
	}{
		{"default", Policy{}, false},
		{"skip_paths_only", Policy{SkipPaths: []string{"/h"}}, false},
		{"per_route", Policy{Scope: PerRoute}, true},
		{"per_route_named", Policy{Scope: PerRoute, Name: "n"}, false},
		{"skip", Policy{Skip: func(Request) bool { return false }}, true},
		{"on_limited", Policy{OnLimited: func(context.Context, Request, Decision) {}}, true},
		{"on_store_error", Policy{OnStoreError: func(context.Context, Request, error) {}}, true},
		{"deny_response", Policy{DenyResponse: func(context.Context, Request, Decision) *Denial { return nil }}, true},
		{"key_func", Policy{KeyFunc: func(Request) (string, error) { return "", nil }}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustNew(t, s, tc.p).NeedsRoute(); got != tc.want {
				t.Fatalf("NeedsRoute = %v, want %v", got, tc.want)
			}
		})
	}
	if !mustNew(t, s, Policy{}, WithObserver(&tally{})).NeedsRoute() {
		t.Fatal("NeedsRoute false with an Observer")
	}
}
