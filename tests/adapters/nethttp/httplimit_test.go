package httplimit_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
)

// routes builds the same API under each kind of ServeMux mount; mount says
// where the limiter goes.
func routes(mount string, mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
	mux := http.NewServeMux()
	switch mount {
	case "wrap-mux":
		mux.Handle("GET /v1/notes/{id}", h)
		return mw(mux)
	case "route":
		mux.Handle("GET /v1/notes/{id}", mw(h))
	case "sub-mux":
		v1 := http.NewServeMux()
		v1.Handle("GET /v1/notes/{id}", h)
		mux.Handle("/v1/", mw(v1))
	case "method-less":
		mux.Handle("/v1/notes/{id}", mw(h))
	case "wildcard":
		mux.Handle("GET /v1/notes/{id...}", mw(h))
	}
	return mux
}

// Every ServeMux mount finds the pattern: around the mux, on a route, around
// a sub-mux, method-less and wildcard patterns (whose labels differ, so the
// handler label is not checked here).
func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "", []string{"wrap-mux", "route", "sub-mux", "method-less", "wildcard"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			srv := httptest.NewServer(routes(mount, httplimit.Middleware(l), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "note")
			})))
			t.Cleanup(srv.Close)
			return srv.URL
		})
}

func TestHandlerLabelIsThePattern(t *testing.T) {
	store := limittest.NewStore(nil)
	obs := &limittest.Recorder{}
	l := limittest.MustNew(store, limit.Policy{}, limit.WithObserver(obs))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()
	limittest.Do(t, limittest.ClientFrom("127.0.0.6"), "HEAD", srv.URL+"/v1/notes/5")
	if e := obs.Last(); e.Handler != "GET /v1/notes/{id}" || e.Bucket != "100p60" {
		t.Fatalf("event %+v, want handler \"GET /v1/notes/{id}\" in the shared bucket", e)
	}
}

// Several global limiters stacked on one mux all see the route: each mount
// looks it up in the mux the innermost one wraps.
func TestStackedMountsSeeTheRoute(t *testing.T) {
	store := limittest.NewStore(nil)
	obs := &limittest.Recorder{}
	outer := limittest.MustNew(store, limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
	inner, err := outer.With(limit.Policy{Limit: 3, Scope: limit.PerRoute})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(outer)(httplimit.Middleware(inner)(mux)))
	defer srv.Close()
	limittest.Do(t, limittest.ClientFrom("127.0.0.12"), "GET", srv.URL+"/v1/notes/1")
	var buckets []string
	for _, e := range obs.Decisions() {
		buckets = append(buckets, e.Bucket)
	}
	if want := []string{"/v1/notes/{id} 2p60", "/v1/notes/{id} 3p60"}; !slices.Equal(buckets, want) {
		t.Fatalf("buckets %q, want %q (outer, then inner)", buckets, want)
	}
	if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
		t.Fatalf("%d route-unknown issues, want 0", n)
	}
}

func TestUnknownRouteFallsBackToShared(t *testing.T) {
	tests := []struct {
		name string
		path string
		wrap bool // the mux is wrapped by other middleware before the limiter
	}{
		{"not_found", "/nothing", false},
		{"method_not_allowed", "/v1/notes/1", false}, // POST on a GET pattern
		{"unknown_method", "/v1/notes/1", false},     // FOO on a GET pattern
		{"mux_hidden_by_other_middleware", "/v1/notes/1", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := limittest.NewStore(nil)
			obs := &limittest.Recorder{}
			l := limittest.MustNew(store, limit.Policy{Limit: 1, Scope: limit.PerRoute}, limit.WithObserver(obs))
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
			var h http.Handler = mux
			if tc.wrap {
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) })
			}
			srv := httptest.NewServer(httplimit.Middleware(l)(h))
			defer srv.Close()
			method := "GET"
			switch tc.name {
			case "method_not_allowed":
				method = "POST"
			case "unknown_method":
				method = "FOO"
			}
			limittest.Do(t, limittest.ClientFrom("127.0.0.7"), method, srv.URL+tc.path)
			if got := obs.Last().Bucket; got != "1p60" {
				t.Fatalf("bucket %q, want the Shared fallback \"1p60\"", got)
			}
			// Unmatched requests (the mux's 404 and 405) are not an
			// unknown route; a mux hidden behind other middleware is.
			want := 0
			if tc.wrap {
				want = 1
			}
			if n := obs.Issues(limit.Issue("route-unknown")); n != want {
				t.Fatalf("%d route-unknown issues, want %d", n, want)
			}
		})
	}
}

// A CONNECT request the mux would redirect to a trailing slash makes
// mux.Handler report the redirect's target path, which the client chose. It
// must not become a bucket (one per path would be unbounded).
func TestConnectRedirectPathIsNotABucket(t *testing.T) {
	store := limittest.NewStore(nil)
	obs := &limittest.Recorder{}
	l := limittest.MustNew(store, limit.Policy{Scope: limit.PerRoute}, limit.WithObserver(obs))
	mux := http.NewServeMux()
	mux.HandleFunc("/files/{name}/", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()
	for _, name := range []string{"a1", "b2"} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "CONNECT /files/"+name+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Fatalf("CONNECT /files/%s: %d, want the mux's 307 (the test no longer exercises the redirect)", name, resp.StatusCode)
		}
		if got := obs.Last().Bucket; strings.Contains(got, name) {
			t.Fatalf("bucket %q contains the request path", got)
		}
	}
	// The same path with GET is a redirect too, and reports the real pattern.
	limittest.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", srv.URL+"/files/c3")
	if got := obs.Last().Bucket; got != "/files/{name}/ 100p60" {
		t.Fatalf("GET redirect bucket %q, want the pattern's", got)
	}
}

// DESIGN (Buckets): "Scope PerRoute: bucket = matched route template,
// normalised to {param} spelling"; limit.NormalizeRoute documents
// "net/http's end anchor "{$}" is dropped". It drops the slash before it
// too: "GET /v1/notes/{$}" becomes "/v1/notes", the bucket of the distinct
// route "GET /v1/notes" (and "GET /{$}" becomes "/", the bucket of the
// catch-all "/"). Two different routes then share one per-route allowance.
func TestRegressionEndAnchorRouteSharesBucketWithAnotherRoute(t *testing.T) {
	if got := limit.NormalizeRoute("GET /v1/notes/{$}"); got != "/v1/notes/" {
		t.Errorf(`NormalizeRoute("GET /v1/notes/{$}") = %q, want "/v1/notes/" (only the anchor dropped)`, got)
	}
	store := limittest.NewStore(nil)
	l := limittest.MustNew(store, limit.Policy{Scope: limit.PerRoute, Limit: 1, Window: time.Minute})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/notes/{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "list") })
	mux.HandleFunc("GET /v1/notes", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "other") })
	h := httplimit.Middleware(l)(mux)

	do := func(target string) int { return limittest.Serve(h, http.MethodGet, target, "192.0.2.40:1234").Code }
	if c := do("/v1/notes/"); c != 200 {
		t.Fatalf("GET /v1/notes/: %d", c)
	}
	if c := do("/v1/notes"); c != 200 {
		t.Errorf("GET /v1/notes (route \"GET /v1/notes\", first request on it): %d, want 200: "+
			"it shares the per-route bucket of \"GET /v1/notes/{$}\"", c)
	}
}

// A PerRoute limit around the ServeMux counts every spelling the mux
// serves as POST /v1/login in that route's bucket: the mux's own clean-path
// redirects (doubled slashes, dot segments) are looked up with mux.Handler,
// and path-rewriting middleware goes in front of the limiter, as the
// package documentation says (here one that strips a trailing slash).
func TestPerRouteBucketWhateverTheSpelling(t *testing.T) {
	conformance.CheckSpellings(t, []string{"/v1//login", "/v1/./login", "/v1/login/"},
		func(t *testing.T, l *limit.Limiter) string {
			mux := http.NewServeMux()
			mux.HandleFunc("POST /v1/login", func(http.ResponseWriter, *http.Request) {})
			stripSlash := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
						r.URL.Path = strings.TrimSuffix(p, "/")
					}
					next.ServeHTTP(w, r)
				})
			}
			srv := httptest.NewServer(stripSlash(httplimit.Middleware(l)(mux)))
			t.Cleanup(srv.Close)
			return srv.URL
		})
}

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

// A client that leaves while its request's decision waits on a slow store
// releases the decision at once, and the handler does not run.
func TestClientGoneReleasesTheDecision(t *testing.T) { conformance.CheckClientGone(t, harness{}) }

// harness builds a ServeMux for a conformance App: global limiters around
// the root mux, each group as a sub-mux under "<prefix>/" wrapped in the
// group's limiters, route limiters around the route's handler. Patterns
// carry the method ("GET /v1/notes/{id}").
type harness struct{}

func (harness) Name() string { return "nethttp" }

func (harness) KeyFunc(name string) func(limit.Request) (string, error) {
	return httplimit.KeyFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return httplimit.CostFunc(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.FormValue(name), 10, 64); return n })
}

func (harness) PlanFunc(name string) func(limit.Request) (string, error) {
	return httplimit.PlanFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

// wrap mounts ls around h, the first limiter outermost.
func wrap(ls []*limit.Limiter, h http.Handler) http.Handler {
	for i := len(ls) - 1; i >= 0; i-- {
		h = httplimit.Middleware(ls[i])(h)
	}
	return h
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	mux := http.NewServeMux()
	handler := func(rt *conformance.Route) http.Handler {
		return wrap(rt.Limiters, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			name, value, status, body := rt.Serve()
			w.Header().Set(name, value)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}))
	}
	for _, g := range app.Groups {
		sub := http.NewServeMux()
		for _, rt := range g.Routes {
			sub.Handle(rt.Method+" "+rt.Path, handler(rt))
		}
		mux.Handle(g.Prefix+"/", wrap(g.Limiters, sub))
	}
	for _, rt := range app.Routes {
		mux.Handle(rt.Method+" "+rt.Path, handler(rt))
	}
	conformance.ServeHandler(t, ln, wrap(app.Global, mux))
}

// muxWith is a ServeMux for GET /v1/notes/{id} wrapped in l's middleware,
// or the mux alone when l is nil.
func muxWith(l *limit.Limiter) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
	if l == nil {
		return mux
	}
	return httplimit.Middleware(l)(mux)
}

// BenchmarkMiddleware measures one allowed request through the middleware
// around a ServeMux (routing included), Shared and PerRoute; "mux-only" is
// the ServeMux alone, for the difference.
func BenchmarkMiddleware(b *testing.B) {
	conformance.BenchmarkMiddleware(b, "mux-only", redistest.Memory, muxWith)
}

// The middleware adds no allocation of its own on the allowed path at the
// default disclosure: around a handler (route from r.Pattern) it allocates
// nothing; around a ServeMux only the mux's own match slice (as the mux
// alone does).
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	h := httplimit.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/v1/notes/7", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	r.Pattern = "GET /v1/notes/{id}"
	w := limittest.NewSink()
	h.ServeHTTP(w, r)
	if got := testing.AllocsPerRun(500, func() { h.ServeHTTP(w, r) }); got > 0 {
		t.Fatalf("%.1f allocations per allowed request, want 0", got)
	}
}

// interfaces lists which optional interfaces w has.
func interfaces(w http.ResponseWriter) [3]bool {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	return [3]bool{f, h, p}
}

// A policy that counts only failures: the mount observes the status through
// StatusWriter, which keeps exactly the server's optional interfaces (HTTP/1:
// Flusher and Hijacker; HTTP/2: Flusher and Pusher), so a streaming handler
// still flushes and a WebSocket-style handler still hijacks. Successes
// (written, flushed, or nothing written: 200) are given back; the third
// failure is limited.
func TestCountStatusKeepsOptionalInterfaces(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Hour,
			CountStatus: func(s int) bool { return s >= 400 }})
		mux := http.NewServeMux()
		var outer, inner [3]bool
		mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
			inner = interfaces(w)
			_, _ = w.Write([]byte("a"))
			w.(http.Flusher).Flush()
		})
		mux.HandleFunc("GET /empty", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("GET /fail", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
		mux.HandleFunc("GET /hijack", func(w http.ResponseWriter, r *http.Request) {
			c, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = rw.Flush()
			_ = c.Close()
		})
		limited := httplimit.Middleware(l)(mux)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outer = interfaces(w)
			limited.ServeHTTP(w, r)
		}))
		srv.EnableHTTP2 = h2
		srv.StartTLS()
		c := srv.Client()
		get := func(path string, want int) {
			t.Helper()
			res, err := c.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = bufio.NewReader(res.Body).ReadString(0)
			_ = res.Body.Close()
			if res.StatusCode != want {
				t.Fatalf("h2=%v GET %s: %d, want %d", h2, path, res.StatusCode, want)
			}
		}
		for range 3 {
			get("/stream", 200)
			get("/empty", 200)
		}
		if outer != inner || !inner[0] || inner[1] == h2 || inner[2] != h2 {
			t.Fatalf("h2=%v: the handler saw Flusher/Hijacker/Pusher %v, the server's writer has %v", h2, inner, outer)
		}
		if !h2 {
			for range 3 {
				get("/hijack", 200) // 101 recorded: not a failure
			}
			// A hijacked request's charge comes back when its handler
			// returns, after the client has its answer: wait for it.
			for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if d, err := l.Peek(context.Background(), "127.0.0.1"); err == nil && d.Remaining == 1 || time.Now().After(end) {
					break
				}
			}
		}
		get("/fail", 500)
		get("/fail", 500)
		get("/stream", 429)
		srv.Close()
	}
}
