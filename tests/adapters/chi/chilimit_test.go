package chilimit_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
)

// newStore returns a reference store at a fake clock.
func newStore() *limittest.Store {
	return limittest.NewStore(limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Now)
}

type counter struct{ n atomic.Int64 }

func (c *counter) handler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// routes builds the same API under each kind of chi mount and returns the
// router; mount says where the limiter goes.
func routes(mount string, mw func(http.Handler) http.Handler, h http.HandlerFunc) http.Handler {
	notes := func(r chi.Router, path string) { // GET and HEAD, as CheckMounts asks
		r.Get(path, h)
		r.Head(path, h)
	}
	r := chi.NewRouter()
	switch mount {
	case "root-use":
		r.Use(mw)
		notes(r, "/v1/notes/{id}")
	case "group":
		r.Group(func(g chi.Router) {
			g.Use(mw)
			notes(g, "/v1/notes/{id}")
		})
	case "route":
		r.Route("/v1", func(sub chi.Router) {
			sub.Use(mw)
			notes(sub, "/notes/{id}")
		})
	case "with":
		notes(r.With(mw), "/v1/notes/{id}")
	case "mount":
		sub := chi.NewRouter()
		sub.Use(mw)
		notes(sub, "/notes/{id}")
		r.Mount("/v1", sub)
	}
	return r
}

func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/{id}", []string{"root-use", "group", "route", "with", "mount"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			srv := httptest.NewServer(routes(mount, chilimit.Middleware(l), func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "note")
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		})
}

// DESIGN (Buckets): "Scope PerRoute: bucket = matched route template ...
// chi ... before routing (a root r.Use mount) rctx.Routes.Find(...)". chi's
// own path-rewriting middleware (middleware.StripSlashes, CleanPath) routes
// on rctx.RoutePath; RoutePattern ignores it and looks up the raw URL path,
// so a request that chi routes to POST /v1/login draws on the Shared
// fallback bucket instead of the route's bucket: the per-route limit of 1
// admits two logins.
func TestRegressionChiRoutePatternIgnoresRoutePath(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mw     func(http.Handler) http.Handler
		target string
	}{
		{"StripSlashes", middleware.StripSlashes, "/v1/login/"},
		{"CleanPath", middleware.CleanPath, "/v1//login"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkRewriteBeforeLimiter(t, tc.mw, tc.target) })
	}
}

// checkRewriteBeforeLimiter mounts rewrite and then a PerRoute limit of 1
// login a minute at the root of a chi router serving POST /v1/login: after
// one login, POST target (which chi serves as /v1/login once rewrite has
// run) is limited, in the route's bucket.
func checkRewriteBeforeLimiter(t *testing.T, rewrite func(http.Handler) http.Handler, target string) {
	t.Helper()
	rec := &limittest.Recorder{}
	login := limittest.MustNew(newStore(), limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute},
		limit.WithObserver(rec))
	var c counter
	r := chi.NewRouter()
	r.Use(rewrite)
	r.Use(chilimit.Middleware(login))
	r.Post("/v1/login", c.handler(200, "ok"))
	const peer = "192.0.2.20:1234"
	if got := limittest.Serve(r, "POST", "/v1/login", peer); got.Code != 200 {
		t.Fatalf("first login: %d", got.Code)
	}
	if got := limittest.Serve(r, "POST", target, peer); got.Code != 429 {
		t.Fatalf("POST %s (routed by chi to /v1/login): %d, handler calls %d; want 429 "+
			"(same route, per-route limit 1 already used)", target, got.Code, c.n.Load())
	}
	if e := rec.Last(); e.Bucket != "/v1/login 1p60f" {
		t.Fatalf("event %+v, want the route's bucket", e)
	}
}

// DESIGN (example servers): "GET /health: skipped by the limiter"; Policy.SkipPaths
// compares Request.Path, the DECODED r.URL.Path, but chi routes on
// r.URL.RawPath when the client sent one. "/%68ealth" decodes to "/health"
// (so the request is skipped: not counted, never limited) while chi routes
// it to another handler ("/{page}"), which is thereby unlimited.
func TestRegressionSkipPathsDecodedPathBypassesLimit(t *testing.T) {
	store := newStore()
	l := limittest.MustNew(store, limit.Policy{Limit: 1, SkipPaths: []string{"/health"}})
	var health, page counter
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/health", health.handler(200, "ok"))
	r.Get("/{page}", page.handler(200, "page"))

	const peer = "192.0.2.30:1234"
	if rec := limittest.Serve(r, "GET", "/about", peer); rec.Code != 200 {
		t.Fatalf("first page: %d", rec.Code)
	}
	if rec := limittest.Serve(r, "GET", "/about", peer); rec.Code != 429 {
		t.Fatalf("second page: %d, want 429", rec.Code)
	}
	for i := 0; i < 5; i++ {
		rec := limittest.Serve(r, "GET", "/%68ealth", peer)
		if rec.Code != 429 {
			t.Errorf("GET /%%68ealth #%d: %d, served by /{page} (page handler calls %d, health %d); "+
				"want 429: the limit of 1 is used up and this request is not /health",
				i, rec.Code, page.n.Load(), health.n.Load())
			break
		}
	}
}

// The limiter mounted before chi's path-rewriting middleware. chi routes
// POST /v1/login/ to /v1/login once StripSlashes (mounted after the
// limiter) has rewritten the path, so the PerRoute bucket must be the
// route's: 3 logins, then 3 with a trailing slash, all limited. The kind:
// whatever chi's own rewriting middleware (StripSlashes, CleanPath,
// URLFormat) runs after a root mount, the request counts in the bucket of
// the route chi finally serves.
func TestRegressionPerRouteBucketBeforePathRewriting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite []func(http.Handler) http.Handler
		target  string
	}{
		{"StripSlashes", []func(http.Handler) http.Handler{middleware.StripSlashes}, "/v1/login/"},
		{"CleanPath", []func(http.Handler) http.Handler{middleware.CleanPath}, "/v1//login"},
		{"CleanPath-dot-segments", []func(http.Handler) http.Handler{middleware.CleanPath}, "/v1/x/../login"},
		{"URLFormat", []func(http.Handler) http.Handler{middleware.URLFormat}, "/v1/login.json"},
		{"CleanPath+URLFormat", []func(http.Handler) http.Handler{middleware.CleanPath, middleware.URLFormat}, "/v1//login.json"},
		{"StripSlashes+CleanPath", []func(http.Handler) http.Handler{middleware.StripSlashes, middleware.CleanPath}, "/v1//login/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &limittest.Recorder{}
			login := limittest.MustNew(newStore(), limit.Policy{
				Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute,
			}, limit.WithObserver(rec))
			var c counter
			r := chi.NewRouter()
			r.Use(chilimit.Middleware(login))
			r.Use(tc.rewrite...)
			r.Post("/v1/login", c.handler(200, "ok"))

			const peer = "192.0.2.21:1234"
			for i := 0; i < 3; i++ {
				if rec := limittest.Serve(r, "POST", "/v1/login", peer); rec.Code != 200 {
					t.Fatalf("login %d: %d, want 200", i+1, rec.Code)
				}
			}
			for i := 0; i < 3; i++ {
				if got := limittest.Serve(r, "POST", tc.target, peer); got.Code != 429 {
					t.Fatalf("POST %s #%d (chi serves /v1/login): %d, handler calls %d; want 429: the route's limit of 3 is spent",
						tc.target, i+1, got.Code, c.n.Load())
				}
			}
			if e := rec.Last(); e.Bucket != "/v1/login 3p60f" || e.Handler != "/v1/login" {
				t.Fatalf("event %+v, want the route's bucket", e)
			}
			if n := rec.Issues(limit.Issue("route-unknown")); n != 0 {
				t.Fatalf("%d route-unknown issues", n)
			}
		})
	}
}

// Rewriting the router cannot be told about (your own middleware,
// middleware.PathRewrite, http.StripPrefix) must run before the limiter, as
// the package documentation says; mounted that way, the rewritten request
// counts in its route's bucket.
func TestRewritingBeforeTheLimiterIsSafe(t *testing.T) {
	checkRewriteBeforeLimiter(t, middleware.PathRewrite("/api/v1/", "/v1/"), "/api/v1/login")
}

// Requests chi serves with no route (404, 405, an unknown method, a path
// that only differs from a route by an escaped slash, which chi does not
// route) are unmatched: at a root or subrouter mount they count in the
// Shared bucket, with no handler label and no route-unknown issue, so a
// scanner is limited by the global mount.
func TestUnmatchedRequestsCountInTheSharedBucket(t *testing.T) {
	all := []struct{ method, path string }{
		{"GET", "/v1/nope"}, {"DELETE", "/v1/notes/1"}, {"FOO", "/v1/notes/1"}, {"GET", "/v1%2Fnotes%2F1"}, {"GET", "/V1/notes/1"},
	}
	for _, mount := range []string{"root-use", "route"} {
		qs := all
		if mount == "route" {
			// A subrouter mounted at /v1 runs for paths under /v1/ only: the
			// root router answers the others (and unknown methods) itself.
			qs = all[:2]
		}
		for _, q := range qs {
			rec := &limittest.Recorder{}
			l := limittest.MustNew(newStore(), limit.Policy{Scope: limit.PerRoute, Limit: 5, Window: time.Minute}, limit.WithObserver(rec))
			var c counter
			h := routes(mount, chilimit.Middleware(l), c.handler(200, "note"))
			got := limittest.Serve(h, q.method, q.path, "192.0.2.23:1234")
			if got.Code != http.StatusNotFound && got.Code != http.StatusMethodNotAllowed {
				t.Fatalf("%s: %s %s: %d, want chi's 404 or 405", mount, q.method, q.path, got.Code)
			}
			if e := rec.Last(); e.Bucket != "5p60" || e.Handler != "" {
				t.Fatalf("%s: %s %s: event %+v, want the Shared bucket and no handler label", mount, q.method, q.path, e)
			}
			if n := rec.Issues(limit.Issue("route-unknown")); n != 0 {
				t.Fatalf("%s: %s %s: %d route-unknown issues, want 0", mount, q.method, q.path, n)
			}
		}
	}
}

// Every spelling chi's own rewriting middleware serves as POST /v1/login
// counts in that route's bucket, the limiter mounted first.
func TestPerRouteBucketWhateverTheSpelling(t *testing.T) {
	conformance.CheckSpellings(t, []string{"/v1/login/", "/v1//login", "/v1/./login", "/v1/login.json", "//v1/login/"},
		func(t *testing.T, l *limit.Limiter) string {
			r := chi.NewRouter()
			r.Use(chilimit.Middleware(l), middleware.CleanPath, middleware.URLFormat)
			r.Post("/v1/login", func(w http.ResponseWriter, _ *http.Request) {})
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			return srv.URL
		})
}

// The middleware adds no allocation of its own on the allowed path at the
// default disclosure (the engine + reference store add none either), and at
// most 3 with RateLimit headers on every response.
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	for _, tt := range []struct {
		name string
		d    limit.Disclosure
		max  float64
	}{{"default", limit.DiscloseRetryAfter, 0}, {"always", limit.DiscloseAlways, 3}} {
		t.Run(tt.name, func(t *testing.T) {
			l := limittest.MustNew(newStore(), limit.Policy{Limit: 1 << 20, Window: time.Hour, Disclosure: tt.d})
			h := chilimit.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequest("GET", "/v1/notes/1", nil)
			r.RemoteAddr = "192.0.2.10:5555"
			w := limittest.NewSink()
			h.ServeHTTP(w, r)
			got := testing.AllocsPerRun(500, func() {
				clear(w.H)
				h.ServeHTTP(w, r)
			})
			if got > tt.max {
				t.Fatalf("%.1f allocations per allowed request, want at most %.0f", got, tt.max)
			}
		})
	}
}

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

// A client that leaves while its request's decision waits on a slow store
// releases the decision at once, and the handler does not run.
func TestClientGoneReleasesTheDecision(t *testing.T) { conformance.CheckClientGone(t, harness{}) }

// harness builds a chi router for a conformance App: global limiters with
// r.Use, groups as r.Route subrouters with Use, route limiters with r.With.
type harness struct{}

func (harness) Name() string { return "chi" }

func (harness) KeyFunc(name string) func(limit.Request) (string, error) {
	return chilimit.KeyFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return chilimit.CostFunc(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.URL.Query().Get(name), 10, 64); return n })
}

func (harness) PlanFunc(name string) func(limit.Request) (string, error) {
	return chilimit.PlanFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	r := chi.NewRouter()
	for _, l := range app.Global {
		r.Use(chilimit.Middleware(l))
	}
	add := func(r chi.Router, rt *conformance.Route, path string) {
		var mws chi.Middlewares
		for _, l := range rt.Limiters {
			mws = append(mws, chilimit.Middleware(l))
		}
		r.With(mws...).Method(rt.Method, path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			name, value, status, body := rt.Serve()
			w.Header().Set(name, value)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}))
	}
	for _, g := range app.Groups {
		r.Route(g.Prefix, func(sub chi.Router) {
			for _, l := range g.Limiters {
				sub.Use(chilimit.Middleware(l))
			}
			for _, rt := range g.Routes {
				add(sub, rt, rt.Relative(g.Prefix))
			}
		})
	}
	for _, rt := range app.Routes {
		add(r, rt, rt.Path)
	}
	conformance.ServeHandler(t, ln, r)
}
