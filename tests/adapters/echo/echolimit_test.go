package echolimit_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
)

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

// harness builds an echo server for a conformance App: global limiters with
// e.Use, groups with e.Group(prefix, middleware...), route limiters as route
// middleware.
type harness struct{}

func (harness) Name() string { return "echo" }

func (harness) KeyFunc(name string) limit.KeyFunc {
	return echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.Request().Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return echolimit.CostFunc(func(c echo.Context) int64 { n, _ := strconv.ParseInt(c.QueryParam(name), 10, 64); return n })
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	for _, l := range app.Global {
		e.Use(echolimit.Middleware(l))
	}
	mws := func(ls []*limit.Limiter) []echo.MiddlewareFunc {
		var m []echo.MiddlewareFunc
		for _, l := range ls {
			m = append(m, echolimit.Middleware(l))
		}
		return m
	}
	handler := func(rt *conformance.Route) echo.HandlerFunc {
		return func(c echo.Context) error {
			name, value, status, body := rt.Serve()
			c.Response().Header().Set(name, value)
			return c.String(status, body)
		}
	}
	for _, g := range app.Groups {
		grp := e.Group(g.Prefix, mws(g.Limiters)...)
		for _, rt := range g.Routes {
			grp.Add(rt.Method, conformance.ColonPath(rt.Relative(g.Prefix)), handler(rt), mws(rt.Limiters)...)
		}
	}
	for _, rt := range app.Routes {
		e.Add(rt.Method, conformance.ColonPath(rt.Path), handler(rt), mws(rt.Limiters)...)
	}
	conformance.ServeHandler(t, ln, e)
}

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

// Requests echo serves with no route (its 404, a group's RouteNotFound
// catch-all, its 405) reach the middleware as unmatched: a PerRoute policy
// counts them in its Shared bucket, with an empty handler label and no
// route-unknown issue.
func TestUnmatchedRoutes(t *testing.T) {
	tests := []struct {
		name, method, path string
		group              bool
		status             int
	}{
		{"root_not_found", "GET", "/nothing", false, http.StatusNotFound},
		{"root_method_not_allowed", "DELETE", "/x", false, http.StatusMethodNotAllowed},
		{"root_unknown_method", "FOO", "/x", false, http.StatusMethodNotAllowed},
		// Under a group, echo routes unmatched paths to the group's catch-all.
		{"group_not_found", "GET", "/g/nothing", true, http.StatusNotFound},
		{"group_method_not_allowed", "DELETE", "/g/x", true, http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &limittest.Recorder{}
			l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
			e := echo.New()
			h := func(c echo.Context) error { return nil }
			if tc.group {
				e.Group("/g", echolimit.Middleware(l)).GET("/x", h)
			} else {
				e.Use(echolimit.Middleware(l))
				e.GET("/x", h)
			}
			r := limittest.Do(t, limittest.ClientFrom("127.0.0.7"), tc.method, serve(t, e)+tc.path)
			if r.Status != tc.status {
				t.Fatalf("status %d, want echo's %d", r.Status, tc.status)
			}
			if got := obs.Last(); got.Bucket != "2p60" || got.Handler != "" {
				t.Fatalf("event %+v, want the Shared bucket \"2p60\" and no handler label", got)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != 0 {
				t.Fatalf("%d route-unknown issues, want 0", n)
			}
			// A served request still has its route's bucket.
			route := "/x"
			if tc.group {
				route = "/g/x"
			}
			limittest.Do(t, limittest.ClientFrom("127.0.0.7"), "GET", serve(t, e)+route)
			if got := obs.Last(); got.Bucket != route+" 2p60" || got.Handler != route {
				t.Fatalf("served request: event %+v, want the route's bucket", got)
			}
		})
	}
}

// An allowed handler's error still reaches echo's error handler.
func TestHandlerErrorReachesTheErrorHandler(t *testing.T) {
	e := echo.New()
	e.Use(echolimit.Middleware(limittest.MustNew(limittest.NewStore(nil), limit.Policy{})))
	e.GET("/err", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	if r := limittest.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", serve(t, e)+"/err"); r.Status != http.StatusTeapot {
		t.Fatalf("handler error: %d, want 418", r.Status)
	}
}

// echoWith is an echo server for GET /v1/notes/:id with l on e.Use, or echo
// alone when l is nil.
func echoWith(l *limit.Limiter) http.Handler {
	e := echo.New()
	if l != nil {
		e.Use(echolimit.Middleware(l))
	}
	e.GET("/v1/notes/:id", func(echo.Context) error { return nil })
	return e
}

// BenchmarkMiddleware measures one allowed request through echo with the
// middleware on e.Use, Shared and PerRoute; "echo-only" is echo alone. Echo
// applies e.Use middleware per request (applyMiddleware in ServeHTTP), so
// any middleware closure costs one allocation there.
func BenchmarkMiddleware(b *testing.B) {
	conformance.BenchmarkMiddleware(b, "echo-only", redistest.Memory, echoWith)
}

// On the allowed path at the default disclosure the only allocation is the
// middleware closure echo builds per request for e.Use middleware.
func TestMiddlewareAllocations(t *testing.T) {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	if got := conformance.AllocsPerRequest(t, echoWith(l)); got > 1 {
		t.Fatalf("%.1f allocations per allowed request, want at most 1 (echo's per-request chain)", got)
	}
}
