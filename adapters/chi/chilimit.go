package chilimit

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	limit "github.com/quotagate/quotagate/engine"
)

// RoutePattern returns the chi route template that r matches
// ("/v1/notes/{id}"), or "" when no route matches. After routing (inline
// r.With or r.Group middleware) it is chi's RoutePattern; before routing (a
// root r.Use, or a subrouter's Use, where the pattern is still "" or ends in
// "/*") it asks the root router's Find, which does not modify r. A HEAD
// request on a route that only has GET gets the GET template.
func RoutePattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return ""
	}
	if len(rctx.RoutePatterns) > 0 {
		if p := rctx.RoutePattern(); p != "" && !strings.HasSuffix(p, "*") {
			return p
		}
	}
	if rctx.Routes == nil {
		return ""
	}
	// The path chi routes on: a root middleware such as StripSlashes or
	// CleanPath may have rewritten it into rctx.RoutePath already. Inside a
	// subrouter (RoutePatterns set) RoutePath is relative to the mount, so
	// the root router is asked with the full request path instead.
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if len(rctx.RoutePatterns) == 0 && rctx.RoutePath != "" {
		path = rctx.RoutePath
	}
	p := rctx.Routes.Find(chi.NewRouteContext(), r.Method, path)
	if p == "" && r.Method == http.MethodHead {
		p = rctx.Routes.Find(chi.NewRouteContext(), http.MethodGet, path)
	}
	return p
}

// Middleware returns chi middleware (func(http.Handler) http.Handler) that
// decides every request with l (limit.Limiter.HTTPHandler, with RoutePattern
// for the route). Allowed requests reach next with the engine's header
// fields applied (none at the default disclosure; several mounts on one
// request merge); limited requests get the engine's response (429 with
// Retry-After and an RFC 9457 body by default, or what
// Policy.LimitedResponse built) and next is not called. Requests the policy
// skips (SkipPaths, Skip) reach next untouched. Safe for concurrent use; l
// may be shared by several mounts, which then draw on the same buckets.
func Middleware(l *limit.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return l.HTTPHandler(next, RoutePattern) }
}

// KeyFunc adapts a key function over the *http.Request (chi.URLParam works in
// it) to Policy.KeyFunc, e.g. to limit by API key or user ID: limit.KeyFuncOf,
// which explains blank results, errors and panics.
func KeyFunc(f func(r *http.Request) (string, error)) limit.KeyFunc { return limit.KeyFuncOf(f) }

// CostFunc adapts a pricing function over the *http.Request to
// Policy.CostFunc: limit.CostFuncOf.
func CostFunc(f func(r *http.Request) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }
