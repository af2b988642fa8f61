package echolimit

import (
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v5"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns echo middleware that decides every request with l
// (limit.Limiter.CheckHTTP, with the route template c.Path() and the
// *echo.Context as the native context). Allowed requests reach next with
// the engine's header fields added (none at the default disclosure) and
// keep next's status, body and error; limited requests get the engine's
// response (429 with Retry-After and an RFC 9457 body by default), next is
// not called and nil is returned; requests the policy skips reach next
// untouched. Safe for concurrent use; l may be shared by several mounts,
// which then draw on the same buckets.
//
// A request no route serves (echo answers 404 or 405, through its own
// handlers or a RouteNotFound catch-all such as the one a Group with
// middleware registers) is passed to the engine as unmatched
// (limit.Request.Unmatched): it counts in the Shared bucket.
//
// When next returns, it settles the request (limit.Limiter.Finish): a
// request that a later mount limited (a route or group mount under e.Use)
// gives this mount's charge back, and a policy with CountStatus gives it
// back when it does not count the status echo.ResolveResponseStatus gives:
// the committed status, or when next returned an error before writing, the
// error's echo.StatusCode (500 when it has none), as echo's default error
// handler answers it (a custom HTTPErrorHandler that answers otherwise is
// not seen). A handler that panics leaves the request counted.
func Middleware(l *limit.Limiter) echo.MiddlewareFunc {
	rt := &routeTable{}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			p := c.Path()
			known := limit.Request{Route: p, Unmatched: rt.unmatched(c, p), Native: c}
			d := l.CheckHTTP(c.Response(), c.Request(), known)
			if !d.Allowed {
				return nil
			}
			err := next(c)
			_, status := echo.ResolveResponseStatus(c.Response(), err)
			l.Finish(c.Request().Context(), &d, status)
			return err
		}
	}
}

// routeTable knows, for an *echo.Echo, which route paths carry a
// RouteNotFound catch-all (e.RouteNotFound, or the two a Group with
// middleware registers), so that the context's RouteInfo, which echo
// copies on every call, is read only for those paths. Paths come from the
// application's routes, never from the request, so the table stays as
// small as the route list. Reads are lock-free (an immutable map behind an
// atomic pointer); a path not seen yet rebuilds it from the router's
// Routes, once.
type routeTable struct {
	t  atomic.Pointer[routes]
	mu sync.Mutex
}

type routes struct {
	e        *echo.Echo
	catchAll map[string]bool // route path (as c.Path() spells it) -> a RouteNotFound route has it
}

// unmatched reports whether echo serves no route for c: the path is empty
// (echo found no route), echo's router set the Allow value it sets when
// it has no route for the request's method (its 405 and automatic OPTIONS
// answers, which echo's CORS middleware reads the same way), or the route
// echo chose is a RouteNotFound catch-all.
func (rt *routeTable) unmatched(c *echo.Context, path string) bool {
	if path == "" || c.Get(echo.ContextKeyHeaderAllow) != nil {
		return true
	}
	e := c.Echo()
	t := rt.t.Load()
	catchAll, ok := false, false
	if t != nil && t.e == e {
		catchAll, ok = t.catchAll[path]
	}
	if !ok {
		catchAll = rt.rebuild(e, path).catchAll[path]
	}
	return catchAll && c.RouteInfo().Method == echo.RouteNotFound
}

// rebuild lists every route of e again (routes may be added after the
// middleware was built) and records path, which must be in the result.
func (rt *routeTable) rebuild(e *echo.Echo, path string) *routes {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t := rt.t.Load(); t != nil && t.e == e {
		if _, ok := t.catchAll[path]; ok {
			return t
		}
	}
	t := &routes{e: e, catchAll: map[string]bool{path: false}}
	for _, r := range e.Router().Routes() {
		p := routePath(r.Path)
		t.catchAll[p] = t.catchAll[p] || r.Method == echo.RouteNotFound
	}
	rt.t.Store(t)
	return t
}

// routePath spells a registered route path as echo's router gives it to
// c.Path(): with a leading slash ("" is "/").
func routePath(p string) string {
	if p == "" || p[0] != '/' {
		return "/" + p
	}
	return p
}

// KeyFunc adapts a key function over *echo.Context to Policy.KeyFunc, e.g.
// to limit by API key or authenticated user: limit.KeyFuncOf, which
// explains blank results, errors, panics and a key function mounted under
// another framework. Echo reuses the context for later requests once the
// handler returns: do not keep it.
func KeyFunc(f func(c *echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over *echo.Context to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c *echo.Context) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }
