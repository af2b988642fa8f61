// Package echolimit mounts a quotagate limit.Limiter on a labstack/echo v4
// server.
//
//	l := limit.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
//	e := echo.New()
//	e.Use(echolimit.Middleware(l))
//
// The middleware works on e.Use, on groups (e.Group(prefix, mw) or
// Group.Use) and per route (e.GET(path, h, mw)). The matched route template
// is c.Path() ("/v1/notes/:id"), which echo's router sets before any e.Use
// middleware runs; the engine spells it "/v1/notes/{id}" in bucket names.
// Under e.Pre, or for a request no route matches, it is empty: a PerRoute
// policy then falls back to its Shared bucket and reports the route-unknown
// issue. Under a Group's middleware a path no route of the group matches
// reads "/prefix/*" (the catch-all echo registers for the group), so such
// requests share that one bucket.
//
// HEAD and GET on one route share a bucket (register both, e.g. with
// e.Match): neither the method nor the raw path is ever part of a bucket.
//
// The client address is the socket peer, c.Request().RemoteAddr. c.RealIP()
// is never used: without an IPExtractor it trusts the leftmost
// X-Forwarded-For, which any client can forge. Configure trusted proxies on
// the Limiter instead.
//
// Per-route limits, one bucket per route, on a group of routes or on one:
//
//	perRoute, _ := l.With(limit.Policy{Scope: limit.PerRoute, Limit: 5, Window: time.Minute, Algorithm: limit.FixedWindow})
//	v1 := e.Group("/v1", echolimit.Middleware(perRoute))
//	v1.POST("/login", login)
//	e.GET("/v1/search", search, echolimit.Middleware(perRoute))
//
// The adapter holds no policy and writes nothing itself: it hands the engine
// the request, the route and c.Response() (limit.Limiter.CheckHTTP), which
// writes the header fields or the whole limited response, and then calls next
// or returns nil (so echo's HTTPErrorHandler is not involved).
package echolimit
