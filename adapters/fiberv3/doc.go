// Package fiberlimit mounts a quotagate limit.Limiter on a gofiber/fiber v3
// app (fasthttp). It is the fiber v2 adapter's API for fiber v3 (the module
// github.com/quotagate/quotagate/adapters/fiber serves v2): handlers and key
// functions take the fiber.Ctx interface, and moving from v2 to v3 changes
// the import path and the handlers' parameter type only.
//
//	l, err := limit.New(store, limit.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		log.Fatal(err) // names the offending field
//	}
//	app := fiber.New()
//	app.Use(fiberlimit.New(l))
//
// # Routes and PerRoute buckets
//
// At route level (app.Get(path, New(l), h)), once fiber has matched a route
// (c.Matched()), c.FullPath() is the matched template ("/v1/notes/:id",
// spelled "/v1/notes/{id}" in bucket names):
//
//	perRoute, _ := l.With(limit.Policy{Scope: limit.PerRoute, Limit: 5, Window: time.Minute, Algorithm: limit.FixedWindow})
//	byRoute := fiberlimit.New(perRoute)
//	v1 := app.Group("/v1")
//	v1.Post("/login", byRoute, login)
//	v1.Get("/search", byRoute, search)
//
// or, for every route of a group, through Routes, which registers each
// route with the handler in front:
//
//	v1 := fiberlimit.Routes(app.Group("/v1"), perRoute)
//	v1.Post("/login", login)
//	v1.Get("/search", search)
//
// Fiber runs a Use mount (app.Use, Group.Use, app.Group(prefix, handler))
// in front of the routes before it has matched one: c.Matched() is false
// there, and c.Route() is the mount itself. A Limiter whose bucket is the
// route (Scope PerRoute without a Name: limit.Limiter.BucketsByRoute) looks
// up, in such a mount, the route fiber will serve: the first route
// registered after the mount, for the request's method (a GET route's
// automatic HEAD route included, which fiber registers after every other
// route), whose pattern fiber's own matcher accepts for the request's path
// (fiber.RoutePatternMatch with the app's CaseSensitive and StrictRouting;
// a route without parameters is compared as fiber compares it). So a group
// mount gives each route the bucket a route-level mount gives it:
//
//	app.Group("/v1", fiberlimit.New(perRoute)) // /v1/login and /v1/search: a bucket each
//
// and a request that no route after the mount matches (fiber answers 404
// or 405, unless a later Use handler answers) counts in the Shared bucket
// as unmatched, without the route-unknown issue. The lookup costs a
// comparison or two per route of the method and one RoutePatternMatch,
// which parses the pattern (3 allocations on v3.1), for each route with
// parameters whose leading constant the path starts with (usually only the
// one it finds); the route lists are built once and rebuilt only when
// app.Stack() changes (a route added, or removed with RemoveRoute), and
// nothing is kept per request path. Any other Limiter (Shared, the usual
// global limit, or a named policy) has one bucket wherever it is mounted
// and looks nothing up: in a Use mount its template is "", so the metrics'
// handler label is empty there.
//
// What the lookup does not see: a later Use handler that rewrites the path,
// answers the request itself, or a route that passes the request on with
// c.Next() to a later one: the request counts in the bucket of the route
// fiber first reaches after the mount. RoutePatternMatch does not know the
// app's custom constraints (App.RegisterCustomConstraint): a route with
// one is taken for any value of its parameter. c.Matched() stays true for
// the rest of a request once a route has run: a Use mount that a route
// handler reaches by calling c.Next() (fiber's fall-through to the next
// matching handler) sees the Use mount's own path as the template, and
// looks nothing up.
//
// app.Get registers HEAD with the same handlers and template, so HEAD and
// GET on one route share a bucket: neither the method nor the raw path is
// ever part of a bucket. The route is the one fiber serves, whatever
// spelling it accepted (a trailing slash unless StrictRouting, another
// letter case unless CaseSensitive), so those count in the route's bucket,
// at route level and in a Use mount alike.
//
// # Requests no route matches, and CORS preflights
//
// A route-level mount never sees a request no route matches. Mount the same
// Limiter with Unmatched after every route (app.Use(fiberlimit.Unmatched(l)))
// and those requests, which fiber answers 404 or 405, count in its Shared
// bucket, so that scanners are limited by the global limit too; an app.Use
// mount in front of the routes sees every request already (a PerRoute one
// counts those no route matches in its Shared bucket, as above). Unlike fiber
// v2, v3 registers a GET route's automatic HEAD route after every other
// route and mount, so a HEAD request to a GET route passes the Unmatched
// mount before its route: Unmatched therefore decides after c.Next(), and
// only when no route served the request (c.Matched() is false). Fiber answers a
// method outside Config.RequestMethods (e.g. FOO) with 501 before running
// any handler: no mount sees it, and it costs the server no handler. CORS
// preflights (OPTIONS with Access-Control-Request-Method) pass unlimited and
// uncounted unless the policy sets LimitPreflights.
//
// # Client address
//
// The client address is the socket peer, c.RequestCtx().RemoteIP(). c.IP()
// is never used: with TrustProxy and Config.ProxyHeader set it returns the
// header's value, which any client can forge unless the proxy list is exact.
// Configure trusted proxies on the Limiter instead; the adapter gives the
// engine the request's header lines (every line of a repeated header) only
// when it asks for them.
//
// # A client that leaves
//
// fasthttp never cancels a request's context when its client closes the
// connection (it has no such signal), so the decision's context is
// c.Context() watched by package connctx: while a decision waits on its
// store (only then), the adapter peeks at the socket every 20 ms, and a
// client that closed or reset its connection releases the decision as the
// net/http adapters do (see package guard): nothing is admitted and the
// handler does not run. A client that sent a pipelined request before it
// left is not seen. The handlers after the mount get c.Context() as it is.
//
// # How a Use mount's route list is made
//
// fiber.Route marks Use mounts with an unexported field only. The lookup
// does not read it: it asks fiber's public App.GetRoutes(true), which lists
// every route except Use mounts, once per route list, and takes a route of
// the stack for a route when a listed route has the same path and runs the
// same handlers (the same backing array of Handlers). An application that
// passes one handler slice to both a group mount and a route of the same
// path (app.Group("/x", hs...) and app.Get("/x", hs...)) makes that mount
// look like a route to the lookup of a Use mount before it.
//
// # Buffers
//
// fasthttp reuses the memory behind the strings fiber.Ctx returns once the
// handler has returned (unless Config.Immutable). Every string the adapter
// hands the engine (path, peer, header values) is therefore a copy, or
// memory the app owns: the method (one of Config.RequestMethods) and the
// route's registered path; the denial body is copied into the response.
//
// The adapter holds no policy and writes nothing itself: it hands the engine
// the request and fasthttp's response (limit.Limiter.Check, through the
// limit.ResponseWriter the adapter implements over fasthttp), which writes
// the header fields or the whole limited response, and then calls c.Next()
// or returns nil.
package fiberlimit
