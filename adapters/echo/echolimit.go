package echolimit

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns echo middleware that decides every request with l
// (limit.Limiter.CheckHTTP, with the route template c.Path() and the
// echo.Context as the native context). Allowed requests reach next with the
// engine's header fields added (none at the default disclosure) and keep
// next's status, body and error; limited requests get the engine's response
// (429 with Retry-After and an RFC 9457 body by default), next is not called
// and nil is returned; requests the policy skips reach next untouched. Safe
// for concurrent use; l may be shared by several mounts, which then draw on
// the same buckets.
//
// A request no route serves (echo answers 404 or 405, through its own
// handlers or a RouteNotFound catch-all such as the one a Group with
// middleware registers) is passed to the engine as unmatched
// (limit.Request.Unmatched): it counts in the Shared bucket.
//
// When next returns, it settles the request (limit.Limiter.Finish): a
// request that a later mount limited (a route or group mount under e.Use)
// gives this mount's charge back, and a policy with CountStatus gives it
// back when it does not count the status: c.Response().Status, or when next
// returned an error before writing, the status echo's default error handler
// gives it (an *echo.HTTPError's Code, else 500; a custom HTTPErrorHandler
// that answers otherwise is not seen). A handler that panics leaves the
// request counted.
func Middleware(l *limit.Limiter) echo.MiddlewareFunc {
	rt := &routeTable{}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := c.Path()
			known := limit.Request{Route: p, Unmatched: rt.unmatched(c, p), Native: c}
			d := l.CheckHTTP(c.Response(), c.Request(), known)
			if !d.Allowed {
				return nil
			}
			err := next(c)
			l.Finish(c.Request().Context(), &d, status(c, err))
			return err
		}
	}
}

// status is the status of the response to c: what the handler wrote, or
// when it returned an error before writing, the status echo's default
// error handler (Echo.DefaultHTTPErrorHandler) answers it with: the Code
// of an *echo.HTTPError returned as is, or of the *echo.HTTPError in its
// Internal field; 500 for any other error, a wrapped *echo.HTTPError
// included (echo does not unwrap it).
func status(c echo.Context, err error) int {
	r := c.Response()
	if err == nil || r.Committed {
		return r.Status
	}
	he, ok := err.(*echo.HTTPError)
	if !ok {
		return http.StatusInternalServerError
	}
	if in, ok := he.Internal.(*echo.HTTPError); ok {
		return in.Code
	}
	return he.Code
}

// routeTable knows, for each route path of an *echo.Echo, the methods
// registered on it (RouteNotFound catch-alls excluded), so that a request
// echo routed to a catch-all or answers 405 for is told from a served one.
// Paths come from the application's routes, never from the request, so the
// table stays as small as the route list. Reads are lock-free (an immutable
// map behind an atomic pointer); a path not seen yet rebuilds it from
// Echo.Routes and Echo.Routers, once.
type routeTable struct {
	t  atomic.Pointer[routes]
	mu sync.Mutex
}

type routes struct {
	e       *echo.Echo
	methods map[string][]string // path -> methods; a nil slice: a path echo did not list (assumed served)
}

// unmatched reports whether echo serves no route for c: the path is empty
// (echo found nothing), or no route of the request's method is registered
// on it (a 405, echo's automatic OPTIONS answer, or a RouteNotFound
// catch-all).
func (rt *routeTable) unmatched(c echo.Context, path string) bool {
	if path == "" {
		return true
	}
	e := c.Echo()
	t := rt.t.Load()
	var ms []string
	ok := false
	if t != nil && t.e == e {
		ms, ok = t.methods[path]
	}
	if !ok {
		ms = rt.rebuild(e, path).methods[path]
	}
	if ms == nil {
		return false
	}
	method := c.Request().Method
	for _, m := range ms {
		if m == method {
			return false
		}
	}
	return true
}

func (t *routes) has(path string) bool {
	_, ok := t.methods[path]
	return ok
}

// rebuild lists every route of e again (routes may be added after the
// middleware was built) and records path, which must be in the result.
func (rt *routeTable) rebuild(e *echo.Echo, path string) *routes {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t := rt.t.Load(); t != nil && t.e == e && t.has(path) {
		return t
	}
	t := &routes{e: e, methods: map[string][]string{}}
	add := func(rs []*echo.Route) {
		for _, r := range rs {
			ms, ok := t.methods[r.Path]
			if !ok {
				ms = []string{}
			}
			if r.Method != echo.RouteNotFound {
				ms = append(ms, r.Method)
			}
			t.methods[r.Path] = ms
		}
	}
	add(e.Routes())
	for _, r := range e.Routers() {
		add(r.Routes())
	}
	if !t.has(path) {
		t.methods[path] = nil
	}
	rt.t.Store(t)
	return t
}

// KeyFunc adapts a key function over echo.Context to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user: limit.KeyFuncOf, which explains
// blank results, errors, panics and a key function mounted under another
// framework. The context is valid only during the call: do not keep it.
func KeyFunc(f func(c echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over echo.Context to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c echo.Context) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over the echo.Context to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(c echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
