package echolimit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// The status a CountStatus policy sees for a handler's error must be the
// one echo's default error handler answers with: it takes the code of an
// *echo.HTTPError returned as is (or of the *echo.HTTPError in its
// Internal), and answers 500 to anything else, a wrapped *echo.HTTPError
// included. The adapter unwrapped it (errors.As): a handler returning
// fmt.Errorf("...: %w", echo.ErrUnauthorized) answered 500 and was settled
// as 401, so a policy counting server errors (>= 500) refunded every one
// of them; and an HTTPError whose Internal is another HTTPError was settled
// with the outer code while the client got the inner one.
func TestRegressionCountStatusSeesTheStatusEchoAnswers(t *testing.T) {
	for path, h := range map[string]echo.HandlerFunc{
		"/wrapped": func(c echo.Context) error { return fmt.Errorf("signin: %w", echo.ErrUnauthorized) },
		"/internal": func(c echo.Context) error {
			return echo.NewHTTPError(http.StatusBadRequest).SetInternal(echo.NewHTTPError(http.StatusServiceUnavailable))
		},
	} {
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Hour,
			CountStatus: func(s int) bool { return s >= 500 }})
		e := echo.New()
		e.Use(echolimit.Middleware(l))
		e.GET(path, h)
		srv := httptest.NewServer(e)
		var got []int
		for range 4 {
			res, err := srv.Client().Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			got = append(got, res.StatusCode)
		}
		srv.Close()
		want := []int{500, 500, 429, 429}
		if path == "/internal" {
			want = []int{503, 503, 429, 429}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("GET %s: %v, want %v (server errors the client saw were settled as another status)", path, got, want)
		}
	}
}
