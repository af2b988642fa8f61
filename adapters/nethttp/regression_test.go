package httplimit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
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
	l := limit.MustNew(store, limit.Policy{Scope: limit.PerRoute, Limit: 1, Window: time.Minute})
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
