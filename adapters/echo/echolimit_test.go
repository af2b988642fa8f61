package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

func serve(t *testing.T, e *echo.Echo) string {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// routes builds the same API under each kind of echo mount; mount says where
// the limiter goes.
func routes(mount string, mw echo.MiddlewareFunc, h echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	both := []string{http.MethodGet, http.MethodHead}
	switch mount {
	case "echo-use":
		e.Use(mw)
		e.Match(both, "/v1/notes/:id", h)
	case "group-arg":
		e.Group("/v1", mw).Match(both, "/notes/:id", h)
	case "group-use":
		g := e.Group("/v1")
		g.Use(mw)
		g.Match(both, "/notes/:id", h)
	case "route":
		e.Match(both, "/v1/notes/:id", h, mw)
	}
	return e
}

// echo sets c.Path() before any e.Use middleware runs: every mount sees the
// route, spelt echo's way in the handler label.
func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"echo-use", "group-arg", "group-use", "route"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			return serve(t, routes(mount, echolimit.Middleware(l), func(c echo.Context) error { return c.String(http.StatusOK, "note") }))
		})
}

func TestUnmatchedRoutes(t *testing.T) {
	tests := []struct {
		name, path string
		wantBucket string
		wantIssue  int
	}{
		// e.Use sees no route: the Shared fallback, reported.
		{"root_not_found", "/nothing", "2p60", 1},
		// Under a group, echo routes unmatched paths to the group's catch-all.
		{"group_not_found", "/g/nothing", "/g/* 2p60", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &limittest.Recorder{}
			l := limit.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
			e := echo.New()
			h := func(c echo.Context) error { return nil }
			if tc.name == "root_not_found" {
				e.Use(echolimit.Middleware(l))
				e.GET("/x", h)
			} else {
				e.Group("/g", echolimit.Middleware(l)).GET("/x", h)
			}
			r := limittest.Do(t, limittest.ClientFrom("127.0.0.7"), "GET", serve(t, e)+tc.path)
			if r.Status != http.StatusNotFound {
				t.Fatalf("status %d, want echo's 404", r.Status)
			}
			if got := obs.Last().Bucket; got != tc.wantBucket {
				t.Fatalf("bucket %q, want %q", got, tc.wantBucket)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != tc.wantIssue {
				t.Fatalf("%d route-unknown issues, want %d", n, tc.wantIssue)
			}
		})
	}
}

// An allowed handler's error still reaches echo's error handler.
func TestHandlerErrorReachesTheErrorHandler(t *testing.T) {
	e := echo.New()
	e.Use(echolimit.Middleware(limit.MustNew(limittest.NewStore(nil), limit.Policy{})))
	e.GET("/err", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	if r := limittest.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", serve(t, e)+"/err"); r.Status != http.StatusTeapot {
		t.Fatalf("handler error: %d, want 418", r.Status)
	}
}
