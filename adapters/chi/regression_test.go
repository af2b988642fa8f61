package chilimit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
)

func serve(h http.Handler, method, target, peer string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = peer
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
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
		t.Run(tc.name, func(t *testing.T) {
			store := newStore()
			login := limit.MustNew(store, limit.Policy{
				Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute,
			})
			var c counter
			r := chi.NewRouter()
			r.Use(tc.mw)
			r.Use(chilimit.Middleware(login))
			r.Post("/v1/login", c.handler(200, "ok"))

			const peer = "192.0.2.20:1234"
			if rec := serve(r, "POST", "/v1/login", peer); rec.Code != 200 {
				t.Fatalf("first login: %d", rec.Code)
			}
			rec := serve(r, "POST", tc.target, peer)
			if rec.Code != 429 {
				t.Errorf("POST %s (routed by chi to /v1/login): %d, handler calls %d; want 429 "+
					"(same route, per-route limit 1 already used)", tc.target, rec.Code, c.n.Load())
			}
		})
	}
}

// DESIGN (example servers): "GET /health: skipped by the limiter"; Policy.SkipPaths
// compares Request.Path, the DECODED r.URL.Path, but chi routes on
// r.URL.RawPath when the client sent one. "/%68ealth" decodes to "/health"
// (so the request is skipped: not counted, never limited) while chi routes
// it to another handler ("/{page}"), which is thereby unlimited.
func TestRegressionSkipPathsDecodedPathBypassesLimit(t *testing.T) {
	store := newStore()
	l := limit.MustNew(store, limit.Policy{Limit: 1, SkipPaths: []string{"/health"}})
	var health, page counter
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/health", health.handler(200, "ok"))
	r.Get("/{page}", page.handler(200, "page"))

	const peer = "192.0.2.30:1234"
	if rec := serve(r, "GET", "/about", peer); rec.Code != 200 {
		t.Fatalf("first page: %d", rec.Code)
	}
	if rec := serve(r, "GET", "/about", peer); rec.Code != 429 {
		t.Fatalf("second page: %d, want 429", rec.Code)
	}
	for i := 0; i < 5; i++ {
		rec := serve(r, "GET", "/%68ealth", peer)
		if rec.Code != 429 {
			t.Errorf("GET /%%68ealth #%d: %d, served by /{page} (page handler calls %d, health %d); "+
				"want 429: the limit of 1 is used up and this request is not /health",
				i, rec.Code, page.n.Load(), health.n.Load())
			break
		}
	}
}
