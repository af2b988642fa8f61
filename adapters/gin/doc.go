// Package ginlimit mounts a quotagate limit.Limiter on a gin-gonic/gin
// engine.
//
//	l, err := limit.New(store, limit.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		log.Fatal(err) // names the offending field
//	}
//	r := gin.New()
//	r.Use(ginlimit.Middleware(l))
//
// The middleware works on the engine (r.Use), on route groups
// (r.Group(prefix, mw) or RouterGroup.Use) and per route (r.GET(path, mw, h)).
// The matched route template is c.FullPath() ("/v1/notes/:id"), which gin
// sets before the whole handler chain runs, engine-level middleware included;
// the engine spells it "/v1/notes/{id}" in bucket names. gin routes before
// any handler runs, so FullPath is the route gin finally serves, whatever
// spelling it accepted (RemoveExtraSlash, an escaped slash unless
// UseRawPath); its trailing-slash and fixed-path redirects run no handler and
// are not counted (the redirected request is).
//
// # Requests no route matches, and CORS preflights
//
// gin runs the engine-level handlers (r.Use) for a request no route matches:
// the 404 handlers (NoRoute), and the 405 ones (NoMethod) when
// Engine.HandleMethodNotAllowed is set (otherwise a wrong method is a 404).
// Group and route middleware does not run for them. FullPath is empty there,
// and the middleware passes the request to the engine as unmatched
// (limit.Request.Unmatched): it counts in the policy's Shared bucket, a
// PerRoute policy's included, with an empty handler label. So the global
// limit belongs on r.Use, where it also limits scanners (or on r.NoRoute and
// r.NoMethod besides a group); put the paths that must stay unlimited (a
// health check, /metrics) in the policy's SkipPaths. Set
// HandleMethodNotAllowed to answer 405 as the other routers do. CORS
// preflights (OPTIONS with Access-Control-Request-Method) pass unlimited and
// uncounted unless the policy sets LimitPreflights.
//
// HEAD and GET on one route share a bucket (register both): neither the
// method nor the raw path is ever part of a bucket.
//
// The client address is the socket peer, c.Request.RemoteAddr. c.ClientIP()
// is never used: by default gin trusts every proxy, so it believes any
// client's X-Forwarded-For. Configure trusted proxies on the Limiter instead.
//
// Per-route limits, one bucket per route, on a group of routes or on one:
//
//	perRoute, _ := l.With(limit.Policy{Scope: limit.PerRoute, Limit: 5, Window: time.Minute, Algorithm: limit.FixedWindow})
//	v1 := r.Group("/v1", ginlimit.Middleware(perRoute))
//	v1.POST("/login", login)
//	r.GET("/v1/search", ginlimit.Middleware(perRoute), search)
//
// The adapter holds no policy and writes nothing itself: it hands the engine
// the request, the route and c.Writer (limit.Limiter.CheckHTTP), which writes
// the header fields or the whole limited response, and aborts the chain when
// the request is limited.
package ginlimit
