// Package fiberlimit mounts a quotagate limit.Limiter on a gofiber/fiber v2
// app (fasthttp).
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
// At route level (app.Get(path, New(l), h)) c.Route().Path is the matched
// template ("/v1/notes/:id", spelled "/v1/notes/{id}" in bucket names):
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
// before it has matched a route: c.Route() there is the mount itself. A
// Limiter whose bucket is the route (Scope PerRoute without a Name:
// limit.Limiter.BucketsByRoute) looks up, in a Use mount, the route fiber
// will serve: the first route registered after the mount, for the
// request's method, whose pattern fiber's own matcher accepts for the
// request's path (fiber.RoutePatternMatch with the app's CaseSensitive and
// StrictRouting; a route without parameters is compared as fiber compares
// it). So a group mount gives each route the bucket a route-level mount
// gives it:
//
//	app.Group("/v1", fiberlimit.New(perRoute)) // /v1/login and /v1/search: a bucket each
//
// and a request that no route after the mount matches (fiber answers 404
// or 405, unless a later Use handler, static files among them, answers)
// counts in the Shared bucket as unmatched, without the route-unknown
// issue. The lookup costs a comparison or two per route of the method and
// one RoutePatternMatch, which parses the pattern (7 allocations on v2.52),
// for each route with parameters whose leading constant the path starts
// with (usually only the one it finds); the route lists are built once and
// rebuilt only when app.Stack() changes, and nothing is kept per request
// path. Any other Limiter (Shared, the usual global limit, or a named
// policy) has one bucket wherever it is mounted and looks nothing up: in a
// Use mount its template is "", so the metrics' handler label is empty
// there.
//
// What the lookup does not see: a route handler that calls c.Next() into a
// Use mount is followed (the lookup starts after the mount, where fiber
// goes on), but a later Use handler that rewrites the path (c.Path(p)),
// answers the request itself, or passes it on with c.Next() from a route
// to a later one is not: the request counts in the bucket of the route
// fiber first reaches after the mount. A Use mount that shares its handler
// slice with a route (see below) takes that route's template. Where the
// route cannot be told at all (fiber's stand-in route in its error
// handler), a PerRoute policy falls back to its Shared bucket and reports
// the route-unknown issue.
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
// counts those no route matches in its Shared bucket, as above). Fiber answers a
// method outside Config.RequestMethods (e.g. FOO) with 400 before running
// any handler: no mount sees it, and it costs the server no handler. CORS
// preflights (OPTIONS with Access-Control-Request-Method) pass unlimited and
// uncounted unless the policy sets LimitPreflights.
//
// # Client address
//
// The client address is the socket peer, c.Context().RemoteIP(). c.IP() is
// never used: with Config.ProxyHeader set it returns the header's first value,
// which any client can forge. Configure trusted proxies on the Limiter
// instead; the adapter gives the engine the request's header lines (every line
// of a repeated header) only when it asks for them.
//
// # A client that leaves
//
// fasthttp never cancels a request's context when its client closes the
// connection (it has no such signal), so the decision's context is
// c.UserContext() watched by package connctx: while a decision waits on its
// store (only then), the adapter peeks at the socket every 20 ms, and a
// client that closed or reset its connection releases the decision as the
// net/http adapters do (see package guard): nothing is admitted and the
// handler does not run. A client that sent a pipelined request before it
// left is not seen. The handlers after the mount get c.UserContext() as
// it is.
//
// # Buffers
//
// fasthttp reuses the memory behind the strings *fiber.Ctx returns once the
// handler has returned. Every string the adapter hands the engine (method,
// path, peer, header values) is therefore a copy, or a constant, or the
// route's registered path, which the app owns; the denial body is copied into
// the response.
//
// # How a Use mount is told from a route
//
// fiber.Route marks Use mounts with an unexported field only. The adapter
// does not read it: it asks fiber's public App.GetRoutes(true), which lists
// every route except Use mounts, once per route it runs in (the answer is
// remembered) and once per route list of the lookup above, and takes a
// route of the stack for a route when a listed route has the same path and
// runs the same handlers (the same backing array of Handlers).
// The one limitation: an application that passes one handler slice to both a
// group mount and a route of the same path (app.Group("/x", hs...) and
// app.Get("/x", hs...); app.Use copies its handlers, so it cannot) makes that
// mount look like the route.
//
// The adapter holds no policy and writes nothing itself: it hands the engine
// the request and fasthttp's response (limit.Limiter.Check, through the
// limit.ResponseWriter the adapter implements over fasthttp), which writes the
// header fields or the whole limited response, and then calls c.Next() or
// returns nil.
package fiberlimit
