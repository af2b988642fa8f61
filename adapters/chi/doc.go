// Package chilimit mounts a quotagate limit.Limiter on a go-chi/chi v5 router.
//
//	l := limit.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
//	r := chi.NewRouter()
//	r.Use(chilimit.Middleware(l))
//
// The middleware works on the root router (the matched route template is
// looked up before routing with the router's own Find, so PerRoute buckets work
// there too), on r.Group and r.Route subrouters, and inline with r.With. HEAD
// and GET on one route share a bucket: neither the method nor the raw path is
// ever part of a bucket.
//
// The adapter holds no policy and writes nothing itself: the engine's
// net/http handler (limit.Limiter.HTTPHandler) decides the request and writes
// its header fields or its limited response; the adapter only supplies the
// matched route (RoutePattern).
package chilimit
