// Package httplimit mounts a quotagate limit.Limiter on a plain net/http
// server routed by *http.ServeMux (Go 1.22+ patterns).
//
//	l, err := limit.New(store, limit.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		log.Fatal(err) // names the offending field
//	}
//	mux := http.NewServeMux()
//	mux.HandleFunc("GET /v1/notes/{id}", notes)
//	http.ListenAndServe(addr, httplimit.Middleware(l)(mux))
//
// Where the matched route template comes from (read only for PerRoute buckets
// or when an Observer is set):
//   - wrapping a *http.ServeMux directly (the global mount above, or a
//     sub-mux mounted under a prefix), the template is looked up before
//     routing with mux.Handler(r), which does not modify r;
//   - wrapping a handler registered on a ServeMux (a per-route mount), it is
//     r.Pattern, which the mux set before calling the handler.
//
// Anything else in between (the mux wrapped in another middleware first)
// hides the template: a PerRoute policy then falls back to its Shared bucket
// and reports the route-unknown issue. Put the limiter directly around the
// mux, or on the routes. Middleware that rewrites the path (stripping a
// trailing slash or a prefix) therefore goes outside the limiter, where the
// limiter sees the path the mux routes: then every spelling the mux serves
// as a route counts in that route's bucket (the mux's own clean-path
// redirects, for doubled slashes and dot segments, are looked up as the
// route they lead to).
//
// # Requests no route matches, and CORS preflights
//
// Around a ServeMux the middleware sees every request, those the mux answers
// 404 or 405 included, and passes them to the engine as unmatched
// (limit.Request.Unmatched): they count in the policy's Shared bucket, a
// PerRoute policy's included, with an empty handler label. So the global
// limit belongs around the whole mux, where it also limits scanners; put the
// paths that must stay unlimited (a health check, /metrics) in the policy's
// SkipPaths. CORS preflights (OPTIONS with Access-Control-Request-Method)
// pass unlimited and uncounted unless the policy sets LimitPreflights.
//
// Patterns keep their method and host ("GET example.com/v1/notes/{id}"); the
// engine drops both from the bucket (limit.NormalizeRoute), so HEAD and GET on
// one route share a bucket, and a bucket never depends on the method or the
// raw path.
//
// Per-route limits, one bucket per pattern, on a group of routes (a sub-mux)
// or on single routes:
//
//	perRoute, _ := l.With(limit.Policy{Scope: limit.PerRoute, Limit: 5, Window: time.Minute, Algorithm: limit.FixedWindow})
//	v1 := http.NewServeMux()
//	v1.HandleFunc("POST /v1/login", login)
//	v1.HandleFunc("POST /v1/logout", logout)
//	mux.Handle("/v1/", httplimit.Middleware(perRoute)(v1))
//	mux.Handle("GET /v1/search", httplimit.Middleware(perRoute)(http.HandlerFunc(search)))
//
// The adapter holds no policy and writes nothing itself: the engine's
// net/http handler (limit.Limiter.HTTPHandler) decides the request and writes
// its header fields or its limited response; the adapter only supplies the
// matched pattern (RoutePattern).
package httplimit
