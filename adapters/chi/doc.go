// Package chilimit mounts a quotagate limit.Limiter on a go-chi/chi v5 router.
//
//	l, err := limit.New(store, limit.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		log.Fatal(err) // names the offending field
//	}
//	r := chi.NewRouter()
//	r.Use(chilimit.Middleware(l))
//
// The middleware works on the root router (the matched route template is
// looked up before routing with the router's own Find, so PerRoute buckets work
// there too), on r.Group and r.Route subrouters, and inline with r.With. HEAD
// and GET on one route share a bucket: neither the method nor the raw path is
// ever part of a bucket.
//
// # Requests no route matches, and CORS preflights
//
// chi runs the root router's r.Use middleware for every request, those it
// answers 404 or 405 included (its NotFound and MethodNotAllowed handlers run
// inside that chain), and a subrouter's Use middleware for the unmatched
// paths under its prefix. The middleware passes such requests to the engine
// as unmatched (limit.Request.Unmatched): they count in the policy's Shared
// bucket, a PerRoute policy's included, with an empty handler label. So the
// global limit belongs on the root router, r.Use, where it also limits
// scanners; r.Group and r.With mounts see matched routes only. Put the paths
// that must stay unlimited (a health check, /metrics) in the policy's
// SkipPaths. CORS preflights (OPTIONS with Access-Control-Request-Method)
// pass unlimited and uncounted unless the policy sets LimitPreflights.
//
// # Path rewriting
//
// A PerRoute bucket is the route chi finally serves. At a root mount the
// route is looked up before chi routes, so a path that middleware mounted
// after the limiter rewrites is looked up as chi's own rewriting middleware
// would route it: middleware.CleanPath, StripSlashes and URLFormat (see
// RoutePattern); with the limiter first, POST /v1/login/ behind
// StripSlashes counts in the bucket of POST /v1/login. Any other rewriting
// (your own middleware, middleware.PathRewrite, http.StripPrefix) must run
// before the limiter: mount the limiter after it, or inline on the routes
// (r.With), where chi has routed already.
//
// The adapter holds no policy and writes nothing itself: the engine's
// net/http handler (limit.Limiter.HTTPHandler) decides the request and writes
// its header fields or its limited response; the adapter only supplies the
// matched route (RoutePattern).
package chilimit
