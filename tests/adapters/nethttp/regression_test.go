package httplimit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

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

	do := func(target string) int {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.RemoteAddr = "192.0.2.40:1234"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
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
