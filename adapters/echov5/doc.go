// Package echolimit mounts a quotagate limit.Limiter on a labstack/echo v5
// server. It is the echo v4 adapter's API for echo v5 (the module
// github.com/quotagate/quotagate/adapters/echo serves v4): handlers and key
// functions take *echo.Context, and moving from v4 to v5 changes the import
// path only.
//
//	l, err := limit.New(store, limit.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		log.Fatal(err) // names the offending field
//	}
//	e := echo.New()
//	e.Use(echolimit.Middleware(l))
//
// The middleware works on e.Use, on groups (e.Group(prefix, mw) or
// Group.Use) and per route (e.GET(path, h, mw)). The matched route template
// is c.Path() ("/v1/notes/:id"), which echo's router sets before any e.Use
// middleware runs; the engine spells it "/v1/notes/{id}" in bucket names.
// echo routes after its e.Pre middleware, where path rewriting goes
// (middleware.RemoveTrailingSlash, AddTrailingSlash, Rewrite), so on e.Use,
// a group or a route the template is the route echo finally serves, whatever
// spelling the client sent. Do not mount the limiter with e.Pre: echo has not
// routed yet there, so every request looks unmatched (the Shared bucket, no
// handler label).
//
// # Requests no route matches, and CORS preflights
//
// e.Use middleware runs for every request, those echo answers 404 or 405
// included, and a Group's middleware for the unmatched paths under its
// prefix (echo registers a RouteNotFound catch-all for the group). The
// middleware tells those requests from served ones by what echo's router
// reports: an empty c.Path() (no route), the Allow value it keeps for its
// 405 and OPTIONS answers (echo.ContextKeyHeaderAllow), or a RouteNotFound
// route in c.RouteInfo(). It passes them to the engine as
// unmatched (limit.Request.Unmatched): they count in the policy's Shared
// bucket, a PerRoute policy's included, with an empty handler label. So the
// global limit belongs on e.Use, where it also limits scanners; put the
// paths that must stay unlimited (a health check, /metrics) in the policy's
// SkipPaths. CORS preflights (OPTIONS with Access-Control-Request-Method)
// pass unlimited and uncounted unless the policy sets LimitPreflights; echo
// itself answers OPTIONS on a routed path with 204 and Allow.
//
// HEAD and GET on one route share a bucket (register both, e.g. with
// e.Match, or let echo answer HEAD with the GET route,
// RouterConfig.AutoHandleHEAD): neither the method nor the raw path is ever
// part of a bucket.
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
// # Errors
//
// Echo v5 decides the status of a handler's error with echo.StatusCode
// (any error in the chain that implements echo.HTTPStatusCoder, such as
// *echo.HTTPError and the predefined echo.ErrNotFound, else 500); the
// middleware settles a CountStatus policy with that status
// (echo.ResolveResponseStatus) and returns the error unchanged, so that
// echo's HTTPErrorHandler answers it as usual.
//
// The adapter holds no policy and writes nothing itself: it hands the engine
// the request, the route and c.Response() (limit.Limiter.CheckHTTP), which
// writes the header fields or the whole limited response, and then calls next
// or returns nil (so echo's HTTPErrorHandler is not involved). With
// WithHTTPError a denial is returned instead, as a *LimitedError carrying
// the engine's status and body (its header fields are set on c.Response()),
// for the application's HTTPErrorHandler to write:
//
//	e.Use(echolimit.Middleware(l, echolimit.WithHTTPError()))
package echolimit
