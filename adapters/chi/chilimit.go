package chilimit

import (
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	limit "github.com/quotagate/quotagate/engine"
)

// RoutePattern returns the chi route template that r matches
// ("/v1/notes/{id}"), or "" when no route matches. After routing (inline
// r.With or r.Group middleware) it is chi's RoutePattern; before routing (a
// root r.Use, or a subrouter's Use, where the pattern is still "" or ends in
// "/*") it asks the root router's Find, which does not modify r. A HEAD
// request on a route that only has GET gets the GET template (as chi's
// middleware.GetHead routes it).
//
// Before routing, the path chi will finally route on may still be rewritten
// by middleware mounted after the limiter. When the path as it stands
// matches no route, RoutePattern tries the forms chi's own path-rewriting
// middleware would route: middleware.CleanPath (path.Clean: doubled
// slashes, dot segments, a trailing slash), middleware.StripSlashes (one
// trailing slash) and middleware.URLFormat (a ".ext" suffix), alone and
// combined; the first that matches a route is the template. So a request
// that such middleware routes to POST /v1/login counts in that route's
// bucket wherever the limiter is mounted (a request that only differs from
// a route by those spellings counts there even when no such middleware is
// mounted and chi answers 404: the safe direction). Other rewriting (your
// own, middleware.PathRewrite, http.StripPrefix) must run before the
// limiter: mount the limiter after it.
func RoutePattern(r *http.Request) string {
	p, _ := route(r)
	return p
}

// route returns RoutePattern and whether r matches no route at all
// (limit.Request.Unmatched): chi will answer 404 or 405. It is false when
// the route cannot be known (r is not routed by chi).
func route(r *http.Request) (pattern string, unmatched bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return "", false
	}
	if len(rctx.RoutePatterns) > 0 {
		if p := rctx.RoutePattern(); p != "" && !strings.HasSuffix(p, "*") {
			return p, false
		}
	}
	if rctx.Routes == nil {
		return "", false
	}
	// The path chi routes on: a root middleware such as StripSlashes or
	// CleanPath may have rewritten it into rctx.RoutePath already. Inside a
	// subrouter (RoutePatterns set) RoutePath is relative to the mount, so
	// the root router is asked with the full request path instead.
	p := r.URL.RawPath
	if p == "" {
		p = r.URL.Path
	}
	if len(rctx.RoutePatterns) == 0 && rctx.RoutePath != "" {
		p = rctx.RoutePath
	}
	if p == "" {
		p = "/" // as chi routes it
	}
	tctx := routeContexts.Get().(*chi.Context)
	defer routeContexts.Put(tctx)
	if t := find(rctx.Routes, tctx, r.Method, p); t != "" {
		return t, false
	}
	cleaned, stripped := path.Clean(p), p
	if len(p) > 1 && p[len(p)-1] == '/' {
		stripped = p[:len(p)-1]
	}
	for _, c := range [...]string{cleaned, stripped, urlFormat(p), urlFormat(cleaned), urlFormat(stripped)} {
		if c == p {
			continue
		}
		if t := find(rctx.Routes, tctx, r.Method, c); t != "" {
			return t, false
		}
	}
	return "", true
}

// routeContexts holds the scratch chi Contexts of route's lookups (find
// resets one before each use), so that a lookup before routing allocates
// none: a root mount looks up every request whose route the engine reads.
var routeContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// find is Routes.Find for method and path, with a HEAD request that no
// route serves looked up as GET.
func find(routes chi.Routes, tctx *chi.Context, method, path string) string {
	tctx.Reset()
	p := routes.Find(tctx, method, path)
	if p == "" && method == http.MethodHead {
		tctx.Reset()
		p = routes.Find(tctx, http.MethodGet, path)
	}
	return p
}

// urlFormat is the path middleware.URLFormat routes on: without the ".ext"
// suffix of its last segment.
func urlFormat(p string) string {
	if base := strings.LastIndexByte(p, '/'); base >= 0 && strings.IndexByte(p, '.') > 0 {
		if idx := strings.LastIndexByte(p[base:], '.'); idx > 0 {
			return p[:base+idx]
		}
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
//
// After next the request is settled (limit.Limiter.Finish): a request that
// a later mount limited (an r.With or group mount under r.Use) gives this
// mount's charge back, and a policy with CountStatus gives it back when it
// does not count the status next wrote, observed through
// httplimit.StatusWriter (only for such a policy; it keeps http.Flusher,
// http.Hijacker and http.Pusher). A handler that panics leaves the request
// counted (and gives its
// Concurrency slots back).
func Middleware(l *limit.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return l.HTTPHandler(next, route, httplimit.StatusWriter) }
}

// KeyFunc adapts a key function over the *http.Request (chi.URLParam works in
// it) to Policy.KeyFunc, e.g. to limit by API key or user ID: limit.KeyFuncOf,
// which explains blank results, errors and panics.
func KeyFunc(f func(r *http.Request) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over the *http.Request to
// Policy.CostFunc: limit.CostFuncOf.
func CostFunc(f func(r *http.Request) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over the *http.Request to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(r *http.Request) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
