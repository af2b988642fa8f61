package limit_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// CheckHTTP builds the Request view from the *http.Request: the method, the
// escaped path (the form routers route on), the socket peer, every header
// line, the route given and the native context.
func TestCheckHTTPRequestView(t *testing.T) {
	var got limit.Request
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{KeyFunc: func(r limit.Request) (string, error) { got = r; return "", nil }})
	r := httptest.NewRequest("HEAD", "http://example.com/v1/notes/%37?x=1", nil)
	r.RemoteAddr = "[2001:db8::1%eth0]:4711"
	r.Header.Add("X-Forwarded-For", "192.0.2.1")
	r.Header.Add("X-Forwarded-For", "192.0.2.2")
	l.CheckHTTP(httptest.NewRecorder(), r, limit.Request{Route: "/v1/notes/{id}"})
	if got.Route != "/v1/notes/{id}" || got.Method != "HEAD" || got.Path != "/v1/notes/%37" || got.Peer != r.RemoteAddr {
		t.Fatalf("view %+v", got)
	}
	if got.Native != r {
		t.Fatalf("Native is %T, want the *http.Request", got.Native)
	}
	if v := got.Header.Values("x-forwarded-for"); len(v) != 2 || v[1] != "192.0.2.2" {
		t.Fatalf("Header.Values = %q, want both lines", v)
	}
	native := struct{ name string }{"a framework's context"}
	l.CheckHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/plain", nil), limit.Request{Native: native})
	if got.Native != native || got.Path != "/plain" {
		t.Fatalf("native %v path %q", got.Native, got.Path)
	}
}

// HTTPHandler calls next for allowed requests and writes the limited
// response otherwise; it asks for the route only when something reads it.
func TestHTTPHandler(t *testing.T) {
	tests := []struct {
		name      string
		policy    limit.Policy
		observer  bool
		wantCalls int // route lookups over the 3 requests
	}{
		{"shared_skips_route_lookup", limit.Policy{Limit: 2}, false, 0},
		{"per_route_reads_route", limit.Policy{Limit: 2, Scope: limit.PerRoute}, false, 3},
		{"observer_reads_route", limit.Policy{Limit: 2}, true, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []limit.Option
			rec := &limittest.Recorder{}
			if tc.observer {
				opts = append(opts, limit.WithObserver(rec))
			}
			l := limittest.MustNew(storeAt(1_000_000), tc.policy, opts...)
			calls, hits := 0, 0
			h := l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits++
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "made")
			}), func(*http.Request) (string, bool) { calls++; return "/a/:id", false }, nil)
			var last *httptest.ResponseRecorder
			for i := 0; i < 3; i++ {
				last = httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/a/1", nil)
				r.RemoteAddr = "192.0.2.9:1234"
				h.ServeHTTP(last, r)
				if i < 2 && (last.Code != http.StatusCreated || last.Body.String() != "made") {
					t.Fatalf("request %d: %d %q, want the handler's 201", i, last.Code, last.Body.String())
				}
			}
			if last.Code != http.StatusTooManyRequests || hits != 2 {
				t.Fatalf("third request: %d with %d handler runs, want 429 and 2", last.Code, hits)
			}
			if got := last.Body.String(); got != body429Default || last.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("limited response %q %v", got, last.Header())
			}
			if calls != tc.wantCalls {
				t.Fatalf("route looked up %d times, want %d", calls, tc.wantCalls)
			}
			if tc.observer && rec.Last().Handler != "/a/:id" {
				t.Fatalf("observer handler label %q, want the router's spelling", rec.Last().Handler)
			}
		})
	}
}

// HTTPHandler asks for the route only when something reads it: a PerRoute
// bucket without a Name, an Observer (the handler label), or any policy
// function that receives the Request.
func TestHTTPHandlerReadsTheRouteOnlyWhenNeeded(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    limit.Policy
		opts []limit.Option
		want bool
	}{
		{"default", limit.Policy{}, nil, false},
		{"skip_paths_only", limit.Policy{SkipPaths: []string{"/h"}}, nil, false},
		{"per_route", limit.Policy{Scope: limit.PerRoute}, nil, true},
		{"per_route_named", limit.Policy{Scope: limit.PerRoute, Name: "n"}, nil, false},
		{"skip", limit.Policy{Skip: func(limit.Request) bool { return false }}, nil, true},
		{"on_limited", limit.Policy{OnLimited: func(context.Context, limit.Request, limit.Decision) {}}, nil, true},
		{"on_store_error", limit.Policy{OnStoreError: func(context.Context, limit.Request, error) {}}, nil, true},
		{"limited_response", limit.Policy{LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse { return nil }}, nil, true},
		{"key_func", limit.Policy{KeyFunc: func(limit.Request) (string, error) { return "", nil }}, nil, true},
		{"cost_func", limit.Policy{CostFunc: func(limit.Request) int64 { return 0 }}, nil, true},
		{"plan", limit.Policy{Plans: map[string][]limit.Rate{"pro": {{Limit: 2, Window: time.Second}}},
			Plan: func(limit.Request) (string, error) { return "", nil }}, nil, true},
		{"observer", limit.Policy{}, []limit.Option{limit.WithObserver(&limittest.Recorder{})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			h := mustNew(t, limittest.NewStore(nil), tc.p, tc.opts...).HTTPHandler(http.NotFoundHandler(), func(*http.Request) (string, bool) { asked = true; return "/x", false }, nil)
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
			if asked != tc.want {
				t.Fatalf("route asked: %v, want %v", asked, tc.want)
			}
		})
	}
}

// A Shadow policy's log line names the handler: HTTPHandler asks for the
// route.
func TestHTTPHandlerShadowLogNamesTheRoute(t *testing.T) {
	var buf bytes.Buffer
	l := mustNew(t, limittest.NewStore(nil), limit.Policy{Limit: 1, Window: time.Minute, Shadow: true},
		limit.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	h := l.HTTPHandler(http.NotFoundHandler(), func(*http.Request) (string, bool) { return "/v1/notes/{id}", false }, nil)
	for range 2 {
		r := httptest.NewRequest("GET", "/v1/notes/1", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if !strings.Contains(buf.String(), "handler=/v1/notes/{id}") {
		t.Fatalf("shadow log line: %q, want handler=/v1/notes/{id}", buf.String())
	}
}

// A handler that runs no limiter at all adds nothing: with the default
// disclosure an allowed request through CheckHTTP allocates nothing.
func TestCheckHTTPAllowedDoesNotAllocate(t *testing.T) {
	l := limittest.MustNew(storeAt(epochMS), limit.Policy{Limit: 1 << 28, Window: time.Hour})
	r := httptest.NewRequest("GET", "/v1/notes/1", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := httptest.NewRecorder()
	assertNoAllocs(t, l, func() {
		if !l.CheckHTTP(w, r, limit.Request{Route: "/v1/notes/{id}"}).Allowed {
			t.Fatal("limited")
		}
	})
}

// BenchmarkCheckHTTP measures CheckHTTP with the header writing into a
// net/http header map (a reused limittest.Sink, cleared per request), at
// each disclosure and header style, and two mounts merging on one request.
func BenchmarkCheckHTTP(b *testing.B) {
	all := limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
	cases := []struct {
		name string
		p    []limit.Policy
		deny bool
	}{
		{"allowed/default-disclosure", []limit.Policy{{}}, false},
		{"allowed/always-ietf", []limit.Policy{{Disclosure: limit.DiscloseAlways}}, false},
		{"allowed/always-triplet", []limit.Policy{{Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet}}, false},
		{"allowed/always-all-styles", []limit.Policy{{Disclosure: limit.DiscloseAlways, HeaderStyle: all}}, false},
		{"allowed/always-ietf-2-mounts", []limit.Policy{{Disclosure: limit.DiscloseAlways, Name: "global"}, {Disclosure: limit.DiscloseAlways, Name: "route"}}, false},
		{"denied/default-disclosure", []limit.Policy{{Limit: 1}}, true},
		{"denied/on-limit-all-styles", []limit.Policy{{Limit: 1, Disclosure: limit.DiscloseOnLimit, HeaderStyle: all}}, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			ls := make([]*limit.Limiter, len(tc.p))
			for i, p := range tc.p {
				ls[i], _ = benchLimiter(b, p)
			}
			r := httptest.NewRequest("GET", "/v1/notes/1", nil)
			r.RemoteAddr = "192.0.2.1:4711"
			w := limittest.NewSink()
			serve := func() bool {
				clear(w.H)
				for _, l := range ls {
					if !l.CheckHTTP(w, r, limit.Request{}).Allowed {
						return false
					}
				}
				return true
			}
			serve() // create the keys (and exhaust a quota of 1)
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if serve() == tc.deny {
					b.Fatalf("Allowed = %v", !tc.deny)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// processCPU is the CPU time the process has used (every thread: the
// garbage collector's work included); 0 where it is not known
// (http_cpu_unix_test.go knows it on Unix).
var processCPU = func() time.Duration { return 0 }

// reportCPU reports the process CPU time per op since start (processCPU) as
// cpu-ns/op: on shared, busy cores it varies less than ns/op (wall time),
// which counts the time other processes ran.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 && start > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

// With the RateLimit fields on every response, an allowed request through
// CheckHTTP allocates once: the value slices of its fields and the text of
// their numbers share one object. So do limited responses.
func TestCheckHTTPRateLimitFieldsAllocateOnce(t *testing.T) {
	if limittest.RaceEnabled {
		t.Skip("allocation counts are not exact under -race")
	}
	all := limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
	for name, p := range map[string]limit.Policy{
		"always-ietf":       {Disclosure: limit.DiscloseAlways},
		"always-triplet":    {Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet},
		"always-all-styles": {Disclosure: limit.DiscloseAlways, HeaderStyle: all},
		"named":             {Name: "api", Disclosure: limit.DiscloseAlways, HeaderStyle: all},
		"denied":            {Limit: 1},
		"denied-all-styles": {Limit: 1, Disclosure: limit.DiscloseOnLimit, HeaderStyle: all},
	} {
		l, _ := benchLimiter(t, p)
		r := httptest.NewRequest("GET", "/v1/notes/1", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		w := limittest.NewSink()
		serve := func() { clear(w.H); l.CheckHTTP(w, r, limit.Request{}) }
		serve() // the store entry, the pool (and a quota of 1 exhausted)
		if a := testing.AllocsPerRun(1000, serve); a > 1 {
			t.Errorf("%s: %v allocations per request, want at most 1", name, a)
		}
	}
}
