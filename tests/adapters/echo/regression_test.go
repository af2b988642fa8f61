package echolimit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// Policy.SkipPaths is compared with Request.Path, the decoded r.URL.Path,
// while echo routes on r.URL.RawPath when the client sent one (echo.GetPath).
// "/%68ealth" decodes to "/health", so the limiter skips it (not counted,
// never limited), and echo serves it with the "/:page" handler, which is
// thereby unlimited.
func TestRegressionSkipPathsDecodedPathBypassesLimit(t *testing.T) {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1, SkipPaths: []string{"/health"}})
	var health, page atomic.Int64
	e := echo.New()
	e.Use(echolimit.Middleware(l))
	e.GET("/health", func(c echo.Context) error { health.Add(1); return c.String(200, "ok") })
	e.GET("/:page", func(c echo.Context) error { page.Add(1); return c.String(200, "page") })

	do := func(target string) int {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.RemoteAddr = "192.0.2.30:1234"
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec.Code
	}
	if c := do("/about"); c != 200 {
		t.Fatalf("first page: %d", c)
	}
	if c := do("/about"); c != 429 {
		t.Fatalf("second page: %d, want 429", c)
	}
	if c := do("/%68ealth"); c != 429 {
		t.Errorf("GET /%%68ealth: %d (page handler calls %d, health %d); want 429: "+
			"the limit of 1 is used up and echo did not route this to /health", c, page.Load(), health.Load())
	}
}

// echo routes after its Pre middleware (where path rewriting such as
// middleware.RemoveTrailingSlash goes) and before e.Use middleware: a
// limiter on e.Use, as the package documentation says, counts every
// spelling Pre rewrites to POST /v1/login in that route's bucket. (The
// stand-in below does what RemoveTrailingSlash does, without importing
// echo's middleware package and its dependencies.)
func TestPerRouteBucketWhateverTheSpelling(t *testing.T) {
	conformance.CheckSpellings(t, []string{"/v1/login/", "/v1/login//"},
		func(t *testing.T, l *limit.Limiter) string {
			e := echo.New()
			e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error {
					r := c.Request()
					r.URL.Path = "/" + strings.Trim(r.URL.Path, "/")
					return next(c)
				}
			})
			e.Use(echolimit.Middleware(l))
			e.POST("/v1/login", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
			return serve(t, e)
		})
}
