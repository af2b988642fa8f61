package limit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

func TestSkipPaths(t *testing.T) {
	store := storeAt(epochMS)
	obs := &limittest.Recorder{}
	l := mustNew(t, store, limit.Policy{Limit: 1, SkipPaths: []string{"/health", "/metrics"}, Disclosure: limit.DiscloseAlways}, limit.WithObserver(obs))
	for i := 0; i < 5; i++ {
		for _, path := range []string{"/health", "/metrics"} {
			resp := check(l, context.Background(), req("192.0.2.1:1", path))
			if resp.Denied() || !resp.Decision.Allowed || resp.Decision.Outcome != "" || len(resp.Fields()) != 0 {
				t.Fatalf("%s: %+v, want skipped with no fields", path, resp)
			}
		}
	}
	if store.Calls() != 0 || len(obs.Decisions()) != 0 {
		t.Fatalf("skipped requests reached the store (%d) or the observer (%d)", store.Calls(), len(obs.Decisions()))
	}
	// Exact match only: neither a trailing slash nor a prefix is skipped.
	for _, path := range []string{"/health/", "/healthz", "/metrics/x", "/HEALTH"} {
		store.Clear()
		if resp := check(l, context.Background(), req("192.0.2.1:1", path)); resp.Decision.Outcome != limit.OutcomeAllowed {
			t.Fatalf("%s: outcome %q, want it limited as usual", path, resp.Decision.Outcome)
		}
	}
	for _, bad := range []string{"", "health"} {
		_, err := limit.New(store, limit.Policy{SkipPaths: []string{"/ok", bad}})
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "SkipPaths[1]") {
			t.Fatalf("SkipPaths %q: err %v, want ErrInvalidPolicy naming SkipPaths[1]", bad, err)
		}
	}
}

func TestSkipPredicate(t *testing.T) {
	store := storeAt(epochMS)
	obs := &limittest.Recorder{}
	var asked atomic.Int64
	l := mustNew(t, store, limit.Policy{Limit: 1, SkipPaths: []string{"/health"}, Skip: func(r limit.Request) bool {
		asked.Add(1)
		return r.Method == http.MethodOptions
	}}, limit.WithObserver(obs))
	check(l, context.Background(), req("192.0.2.1:1", "/health"))
	if asked.Load() != 0 {
		t.Fatal("Skip was asked about a path SkipPaths already skipped")
	}
	opt := req("192.0.2.1:1", "/x")
	opt.Method = http.MethodOptions
	for i := 0; i < 3; i++ {
		if resp := check(l, context.Background(), opt); resp.Decision.Outcome != "" {
			t.Fatalf("OPTIONS: outcome %q, want skipped", resp.Decision.Outcome)
		}
	}
	if store.Calls() != 0 || len(obs.Decisions()) != 0 {
		t.Fatal("skipped requests were counted or reported")
	}
	first := check(l, context.Background(), req("192.0.2.1:1", "/x"))
	second := check(l, context.Background(), req("192.0.2.1:1", "/x"))
	if first.Denied() || !second.Denied() {
		t.Fatal("GET requests were not limited")
	}
}

// A panicking Skip predicate counts as false: the request is limited as
// usual (a broken predicate never opens the limiter), the panic is reported
// on every request and logged once.
func TestSkipPanicLimitsAsUsual(t *testing.T) {
	store := storeAt(epochMS)
	obs := &limittest.Recorder{}
	var logs limittest.Log
	l := mustNew(t, store, limit.Policy{Limit: 2, Skip: func(limit.Request) bool { panic("skip bug") }}, limit.WithObserver(obs), limit.WithLogger(logs.Logger()))
	var statuses []int
	for i := 0; i < 3; i++ {
		statuses = append(statuses, check(l, context.Background(), req("192.0.2.1:1", "/health")).Status)
	}
	if statuses[0] != 0 || statuses[1] != 0 || statuses[2] != 429 {
		t.Fatalf("statuses %v, want the request limited as usual (0 0 429)", statuses)
	}
	if obs.Issues(limit.Issue("hook-panic")) != 3 || store.Calls() != 3 {
		t.Fatalf("hook-panic (Skip) reported %d times, store called %d times; want 3 and 3", obs.Issues(limit.Issue("hook-panic")), store.Calls())
	}
	if n := logs.Count("Skip panicked"); n != 1 || !strings.Contains(logs.String(), "skip bug") {
		t.Fatalf("logged %d times, want once with the panic value:\n%s", n, logs.String())
	}
}

// A panicking CostFunc prices the request at the policy's Cost, and is
// reported as Issue "hook-panic" (logged once) like the other hooks.
func TestCostFuncPanicCostsThePolicysCost(t *testing.T) {
	store := storeAt(epochMS)
	obs := &limittest.Recorder{}
	var logs limittest.Log
	l := mustNew(t, store, limit.Policy{Limit: 10, Cost: 2, CostFunc: func(limit.Request) int64 { panic("cost bug") }},
		limit.WithObserver(obs), limit.WithLogger(logs.Logger()))
	for i := 0; i < 3; i++ {
		if d := check(l, context.Background(), req("192.0.2.1:1", "/")).Decision; !d.Allowed || d.Cost != 2 {
			t.Fatalf("request %d: allowed %v at cost %d, want admitted at the policy's Cost 2", i, d.Allowed, d.Cost)
		}
	}
	if n := obs.Issues(limit.Issue("hook-panic")); n != 3 {
		t.Fatalf("hook-panic (CostFunc) reported %d times, want 3", n)
	}
	if n := logs.Count("CostFunc panicked"); n != 1 || !strings.Contains(logs.String(), "cost bug") {
		t.Fatalf("logged %d times, want once with the panic value:\n%s", n, logs.String())
	}
}

func TestOnLimited(t *testing.T) {
	store := storeAt(epochMS)
	var calls []limit.Decision
	var reqs []limit.Request
	l := mustNew(t, store, limit.Policy{Name: "api", Limit: 2, OnLimited: func(ctx context.Context, r limit.Request, d limit.Decision) {
		if ctx.Value(ctxKey{}) != "v" {
			t.Error("OnLimited did not get the request's context")
		}
		calls = append(calls, d)
		reqs = append(reqs, r)
	}})
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	for i := 0; i < 4; i++ {
		check(l, ctx, req("192.0.2.1:1", "/v1/x"))
	}
	if len(calls) != 2 {
		t.Fatalf("OnLimited called %d times for 2 denials", len(calls))
	}
	if d := calls[0]; d.Allowed || d.Outcome != limit.OutcomeLimited || d.Bucket != "api" || d.RetryAfter <= 0 || reqs[0].Path != "/v1/x" || reqs[0].Peer != "192.0.2.1:1" {
		t.Fatalf("OnLimited got %+v, %+v", d, reqs[0])
	}
}

type ctxKey struct{}

// A panicking OnLimited changes nothing for the client: the same denial,
// never a 500; the panic is reported and logged once.
func TestOnLimitedPanicKeepsTheDenial(t *testing.T) {
	obs := &limittest.Recorder{}
	var logs limittest.Log
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, OnLimited: func(context.Context, limit.Request, limit.Decision) { panic("hook bug") }},
		limit.WithObserver(obs), limit.WithLogger(logs.Logger()))
	check(l, context.Background(), req("192.0.2.1:1", "/"))
	for i := 0; i < 3; i++ {
		resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
		if resp.Status != 429 || string(resp.Body) != body429Default || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("denial %d: %d %s", i, resp.Status, resp.Body)
		}
	}
	if obs.Issues(limit.Issue("hook-panic")) != 3 || logs.Count("OnLimited panicked") != 1 {
		t.Fatalf("hook-panic %d times, logged %d times; want 3 and 1", obs.Issues(limit.Issue("hook-panic")), logs.Count("OnLimited panicked"))
	}
}

func TestOnStoreError(t *testing.T) {
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var got []error
			limitedCalls := 0
			l := mustNew(t, errStore, limit.Policy{FailureMode: mode,
				OnStoreError: func(_ context.Context, r limit.Request, err error) {
					if r.Path != "/x" {
						t.Errorf("OnStoreError got request %+v", r)
					}
					got = append(got, err)
				},
				OnLimited: func(_ context.Context, _ limit.Request, d limit.Decision) {
					limitedCalls++
					if !d.StoreFailed {
						t.Error("OnLimited on a FailClosed rejection without StoreFailed")
					}
				}})
			resp := check(l, context.Background(), req("192.0.2.1:1", "/x"))
			if len(got) != 1 || !errors.Is(got[0], errBackend) {
				t.Fatalf("OnStoreError got %v", got)
			}
			if wantLimited := map[limit.FailureMode]int{limit.FailOpen: 0, limit.FailClosed: 1}[mode]; limitedCalls != wantLimited {
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
		mode   limit.FailureMode
		status int
	}{{limit.FailOpen, 0}, {limit.FailClosed, 503}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			obs := &limittest.Recorder{}
			var logs limittest.Log
			l := mustNew(t, errStore, limit.Policy{FailureMode: tc.mode, OnStoreError: func(context.Context, limit.Request, error) { panic("hook bug") }},
				limit.WithObserver(obs), limit.WithLogger(logs.Logger()))
			for i := 0; i < 2; i++ {
				if resp := check(l, context.Background(), req("192.0.2.1:1", "/")); resp.Status != tc.status {
					t.Fatalf("status %d, want %d", resp.Status, tc.status)
				}
			}
			if obs.Issues(limit.Issue("hook-panic")) != 2 || obs.StoreErrors() != 2 || logs.Count("OnStoreError panicked") != 1 {
				t.Fatalf("hook-panic %d, store errors %d, logged %d; want 2, 2, 1", obs.Issues(limit.Issue("hook-panic")), obs.StoreErrors(), logs.Count("OnStoreError panicked"))
			}
		})
	}
}

// Consume has no HTTP request: hooks get an empty Request whose Native is
// the identity, and the Decision says the cost.
func TestConsumeHooks(t *testing.T) {
	var limited, failed []limit.Request
	var limitedCost int64
	hooks := limit.Policy{Limit: 2,
		OnLimited: func(_ context.Context, r limit.Request, d limit.Decision) {
			limited = append(limited, r)
			limitedCost = d.Cost
		},
		OnStoreError: func(_ context.Context, r limit.Request, _ error) { failed = append(failed, r) },
	}
	l := mustNew(t, storeAt(epochMS), hooks)
	for i := 0; i < 3; i++ {
		l.ConsumeN(context.Background(), "user-42", 1)
	}
	if len(limited) != 1 || limited[0].Native != "user-42" || limitedCost != 1 || limited[0].Path != "" || limited[0].Peer != "" {
		t.Fatalf("OnLimited from Consume got %+v", limited)
	}
	f := mustNew(t, errStore, hooks)
	if d, err := f.Consume(context.Background(), "user-7"); !errors.Is(err, errBackend) || !d.Allowed || !d.StoreFailed {
		t.Fatalf("Consume on a failing store: %+v, %v", d, err)
	}
	if len(failed) != 1 || failed[0].Native != "user-7" {
		t.Fatalf("OnStoreError from Consume got %+v", failed)
	}
}

func TestLimitedResponse(t *testing.T) {
	var got limit.Decision
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, Disclosure: limit.DiscloseOnLimit,
		LimitedResponse: func(_ context.Context, r limit.Request, d limit.Decision) *limit.LimitedResponse {
			got = d
			return &limit.LimitedResponse{Status: 418, Header: http.Header{"Content-Type": {"text/plain"}, "X-Reason": {"slow", "down"}}, Body: []byte("slow down")}
		}})
	if first := check(l, context.Background(), req("192.0.2.1:1", "/")); first.Denied() || got.Bucket != "" {
		t.Fatal("LimitedResponse ran for an allowed request")
	}
	w := checkHTTP(l, req("192.0.2.1:1", "/"))
	if got.Allowed || got.RetryAfter <= 0 {
		t.Fatalf("LimitedResponse got %+v", got)
	}
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
func TestLimitedResponseDefaultStatus(t *testing.T) {
	build := func(_ context.Context, _ limit.Request, d limit.Decision) *limit.LimitedResponse {
		msg := "quota"
		if d.StoreFailed {
			msg = "store"
		}
		return &limit.LimitedResponse{Body: []byte(msg)}
	}
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, LimitedResponse: build})
	check(l, context.Background(), req("192.0.2.1:1", "/"))
	if resp := check(l, context.Background(), req("192.0.2.1:1", "/")); resp.Status != 429 || string(resp.Body) != "quota" {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	closed := mustNew(t, errStore, limit.Policy{FailureMode: limit.FailClosed, LimitedResponse: build})
	resp := check(closed, context.Background(), req("192.0.2.1:1", "/"))
	if resp.Status != 503 || string(resp.Body) != "store" || resp.Header.Get("Content-Type") != "" {
		t.Fatalf("%d %s %v", resp.Status, resp.Body, resp.Header)
	}
}

// A LimitedResponse that panics, returns nil or returns a status outside
// 400-599 yields the default denial, reported each time and logged once per
// kind.
func TestLimitedResponseFallsBackToTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse
		log   string
	}{
		{"panic", func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse { panic("builder bug") }, "LimitedResponse panicked"},
		{"panic_nil", func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse { panic(nil) }, "LimitedResponse panicked"},
		{"nil", func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse { return nil }, "LimitedResponse returned nil"},
		{"status_200", func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
			return &limit.LimitedResponse{Status: 200, Body: []byte("ok")}
		}, "Status 200, outside 400-599"},
		{"status_600", func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
			return &limit.LimitedResponse{Status: 600}
		}, "Status 600, outside 400-599"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &limittest.Recorder{}
			var logs limittest.Log
			l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, LimitedResponse: tc.build}, limit.WithObserver(obs), limit.WithLogger(logs.Logger()))
			check(l, context.Background(), req("192.0.2.1:1", "/"))
			for i := 0; i < 2; i++ {
				resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
				h := resp.Header
				if resp.Status != 429 || string(resp.Body) != body429Default || h.Get("Content-Type") != "application/problem+json" || h.Get("Retry-After") == "" || resp.Header.Get("X-Reason") != "" {
					t.Fatalf("fallback %d: %d %s %v", i, resp.Status, resp.Body, h)
				}
			}
			if obs.Issues(limit.Issue("limited-response-fallback")) != 2 || logs.Count(tc.log) != 1 {
				t.Fatalf("reported %d times, logged %d times (%q); want 2 and 1:\n%s", obs.Issues(limit.Issue("limited-response-fallback")), logs.Count(tc.log), tc.log, logs.String())
			}
		})
	}
}

// LimitedResponse.Header fields replace engine fields of the same name.
func TestLimitedResponseHeaderReplacesEngineFields(t *testing.T) {
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
		return &limit.LimitedResponse{Header: http.Header{"Retry-After": {"3600"}}}
	}})
	check(l, context.Background(), req("192.0.2.1:1", "/"))
	h := check(l, context.Background(), req("192.0.2.1:1", "/")).Header
	if got := h.Values("Retry-After"); len(got) != 1 || got[0] != "3600" {
		t.Fatalf("Retry-After %q, want the builder's single value", got)
	}
}

// CORS preflights (OPTIONS with Access-Control-Request-Method) pass as
// skipped requests unless Policy.LimitPreflights is set; an OPTIONS request
// without that header is an ordinary request.
func TestPreflights(t *testing.T) {
	preflight := func(method string, acrm bool) limit.Request {
		r := req("192.0.2.1:1", "/v1/notes/1")
		r.Method = method
		h := http.Header{"Origin": {"https://app.example"}}
		if acrm {
			h.Set("Access-Control-Request-Method", "PUT")
		}
		r.Header = h
		return r
	}
	store := storeAt(epochMS)
	l := mustNew(t, store, limit.Policy{Limit: 1})
	for i := 0; i < 3; i++ {
		if resp := check(l, context.Background(), preflight("OPTIONS", true)); resp.Decision.Outcome != "" || resp.Denied() {
			t.Fatalf("preflight %d: %+v, want skipped", i, resp.Decision)
		}
	}
	if store.Calls() != 0 {
		t.Fatalf("preflights reached the store %d times", store.Calls())
	}
	for _, r := range []limit.Request{preflight("OPTIONS", false), preflight("GET", true)} {
		if resp := check(l, context.Background(), r); resp.Decision.Outcome == "" {
			t.Fatalf("%s (Access-Control-Request-Method %q): skipped, want it counted", r.Method, r.Header.Values("Access-Control-Request-Method"))
		}
	}
	opt := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1, LimitPreflights: true})
	if resp := check(opt, context.Background(), preflight("OPTIONS", true)); resp.Decision.Outcome != limit.OutcomeAllowed {
		t.Fatalf("LimitPreflights: first preflight %+v, want allowed", resp.Decision)
	}
	if resp := check(opt, context.Background(), preflight("OPTIONS", true)); !resp.Denied() {
		t.Fatalf("LimitPreflights: second preflight %+v, want limited", resp.Decision)
	}
}

// Per-plan limits: the plan's quotas decide, in records of their own, the
// headers show the plan's numbers, and a Plan function that fails, panics
// or names an unknown plan falls back to the default plan, counted.
func TestPlans(t *testing.T) {
	store := storeAt(epochMS)
	rec := &limittest.Recorder{}
	l := mustNew(t, store, limit.Policy{Name: "export", Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true,
		Disclosure: limit.DiscloseAlways, Plan: planOfHeader,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 4, Window: time.Minute}}, "team": {{Limit: 3, Window: time.Minute}, {Limit: 9, Window: time.Hour}}}},
		limit.WithObserver(rec))
	ctx := context.Background()
	on := func(plan string) limit.Request {
		r := req("192.0.2.7:1", "/v1/export")
		r.Header = http.Header{"X-Plan": {plan}}
		return r
	}
	count := func(plan string) (admitted int, last response) {
		for range 6 {
			last = check(l, ctx, on(plan))
			if last.Decision.Allowed {
				admitted++
			}
		}
		return admitted, last
	}
	if n, last := count("pro"); n != 4 || last.Decision.Plan != "pro" || last.Header.Get("Ratelimit-Policy") != `"export";q=4;w=60` || last.Decision.Limit != 4 {
		t.Fatalf("pro: %d admitted, last %+v %v", n, last.Decision, last.Header)
	}
	// The same client on the default plan has records of its own.
	if n, last := count(""); n != 2 || last.Decision.Plan != "" || last.Header.Get("Ratelimit-Policy") != `"export";q=2;w=60` {
		t.Fatalf("default plan: %d admitted, last %+v %v", n, last.Decision, last.Header)
	}
	if n, last := count("team"); n != 3 || last.Header.Get("Ratelimit-Policy") != `"export/3p60f";q=3;w=60, "export/9p3600f";q=9;w=3600` {
		t.Fatalf("team: %d admitted, last %+v %v", n, last.Decision, last.Header)
	}
	for _, bad := range []string{"boom", "err", "enterprise"} {
		d := check(l, ctx, on(bad)).Decision
		if d.Allowed || d.Plan != "" || d.Limit != 2 {
			t.Fatalf("plan %q: %+v, want the default plan's (exhausted) decision", bad, d)
		}
	}
	if n := rec.Issues(limit.Issue("plan-fallback")); n != 3 {
		t.Fatalf("%d plan-fallback issues, want 3", n)
	}
	// Consume: Request.Native is the identity.
	c := mustNew(t, store, limit.Policy{Name: "jobs", Limit: 1, Window: time.Minute, Plans: map[string][]limit.Rate{"big": {{Limit: 3, Window: time.Minute}}},
		Plan: func(r limit.Request) (string, error) {
			if id, _ := r.Native.(string); strings.HasPrefix(id, "big-") {
				return "big", nil
			}
			return "", nil
		}})
	for id, want := range map[string]int{"big-1": 3, "small-1": 1} {
		n := 0
		for range 5 {
			if d, _ := c.Consume(ctx, id); d.Allowed {
				n++
			}
		}
		if n != want {
			t.Errorf("Consume %s: %d admitted, want %d", id, n, want)
		}
	}
}

// A known plan costs no allocation on the allowed path.
func TestPlanAllocationFree(t *testing.T) {
	store := storeAt(epochMS)
	l := mustNew(t, store, limit.Policy{Name: "alloc", Limit: 1 << 28, Window: time.Hour,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 1 << 29, Window: time.Hour}, {Limit: 1 << 24, Window: 24 * time.Hour}}},
		Plan:  func(limit.Request) (string, error) { return "pro", nil }})
	r := req("192.0.2.9:1", "/")
	w := limittest.NewWriter()
	ctx := context.Background()
	assertNoAllocs(t, l, func() {
		if d := l.Check(ctx, r, w); !d.Allowed || d.Plan != "pro" {
			t.Fatalf("%+v", d)
		}
	})
}

// The default plan can be named: a Plan function returning the name
// (DefaultPlan "free") gets the Policy's own quotas, in their own records,
// with no plan-fallback issue, and the Decision and its event carry the
// name. A name that is also a key of Plans, or not a valid name, is refused.
func TestDefaultPlanCanBeNamed(t *testing.T) {
	store := storeAt(epochMS)
	rec := &limittest.Recorder{}
	p := limit.Policy{Name: "export", Limit: 2, Window: time.Minute, DefaultPlan: "free", Plan: planOfHeader,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 4, Window: time.Minute}}}}
	l := mustNew(t, store, p, limit.WithObserver(rec))
	ctx := context.Background()
	r := req("192.0.2.7:1", "/v1/export")
	r.Header = http.Header{"X-Plan": {"free"}}
	admitted := 0
	for range 4 {
		d := check(l, ctx, r).Decision
		if d.Plan != "free" || d.Limit != 2 {
			t.Fatalf("plan free: %+v; want the default plan's quota, named free", d)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 2 || rec.Issues(limit.Issue("plan-fallback")) != 0 || rec.Last().Plan != "free" {
		t.Fatalf("plan free: %d admitted, %d plan-fallback issues, last event %+v; want 2, 0, plan free",
			admitted, rec.Issues(limit.Issue("plan-fallback")), rec.Last())
	}
	// "" is the default plan too, in the same records.
	r.Header = http.Header{}
	if d := check(l, ctx, r).Decision; d.Allowed || d.Plan != "free" {
		t.Fatalf("plan \"\": %+v; want the exhausted default plan, named free", d)
	}
	for _, bad := range []string{"pro", "a:b", " "} {
		q := p
		q.DefaultPlan = bad
		if _, err := limit.New(storeAt(epochMS), q); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "DefaultPlan") {
			t.Fatalf("DefaultPlan %q: %v; want ErrInvalidPolicy naming DefaultPlan", bad, err)
		}
	}
}

// A typed plan function (PlanFuncOf) reads the framework's request; under
// another framework's Request.Native it is not called: the default plan
// decides and native-mismatch is reported.
func TestPlanFuncOf(t *testing.T) {
	rec := &limittest.Recorder{}
	l := mustNew(t, storeAt(epochMS), limit.Policy{Name: "typed", Limit: 1, Window: time.Minute,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 5, Window: time.Minute}}},
		Plan:  limit.PlanFuncOf(func(r *http.Request) (string, error) { return r.Header.Get("X-Plan"), nil })},
		limit.WithObserver(rec))
	ctx := context.Background()
	hr := httptest.NewRequest("GET", "/", nil)
	hr.Header.Set("X-Plan", "pro")
	r := req("192.0.2.8:1", "/")
	r.Native = hr
	if d := check(l, ctx, r).Decision; d.Plan != "pro" || d.Limit != 5 {
		t.Fatalf("typed plan: %+v; want plan pro", d)
	}
	r.Native = "not a request"
	if d := check(l, ctx, r).Decision; d.Plan != "" || d.Limit != 1 || rec.Issues(limit.Issue("native-mismatch")) != 1 {
		t.Fatalf("typed plan under another Native: %+v, %d native-mismatch; want the default plan, 1", d, rec.Issues(limit.Issue("native-mismatch")))
	}
}
