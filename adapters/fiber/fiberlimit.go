package fiberlimit

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/connctx"
	"github.com/valyala/fasthttp"
)

// New returns a fiber handler that decides every request with l
// (limit.Limiter.Check, writing through fasthttp's response). Allowed
// requests continue with c.Next() after the engine's header fields are added
// (none at the default disclosure), and keep the handlers' status, body and
// error; limited requests get the engine's response (429 with Retry-After
// and an RFC 9457 body by default), c.Next() is not called and nil is
// returned, so fiber's ErrorHandler is not involved; requests the policy
// skips continue untouched. Safe for concurrent use; l may be shared by
// several mounts, which then draw on the same buckets.
//
// The route template is c.Route().Path at route level (app.Get(path, New(l),
// h)). In a Use mount (app.Use, Group.Use, app.Group(prefix, New(l))) fiber
// has not matched a route yet: when l's bucket is the route (a PerRoute
// policy: limit.Limiter.BucketsByRoute), the handler finds the route fiber
// will serve after the mount, with fiber.RoutePatternMatch over the app's
// routes for the request's method in fiber's order, so that each route has
// the bucket a route-level mount would give it, and a request no route
// matches counts as unmatched (see the package documentation). For any
// other Limiter the route changes no bucket and is not looked up: the
// template is "" in a Use mount (the metrics' handler label is empty there).
// Routes mounts l at route level on every route of a group.
func New(l *limit.Limiter) fiber.Handler {
	var routes routeSet
	var next *ahead
	if l.BucketsByRoute() {
		next = new(ahead)
	}
	return func(c *fiber.Ctx) error {
		route := routes.template(c)
		if route != "" || next == nil {
			return serve(l, c, route, false)
		}
		route, unmatched := next.find(c)
		return serve(l, c, route, unmatched)
	}
}

// Routes returns r with l mounted at route level on every route registered
// through it: the way to give a group of routes per-route buckets, since a
// group mount (app.Group(prefix, New(l)), Group.Use) runs before fiber has
// matched a route and so cannot see it.
//
//	v1 := fiberlimit.Routes(app.Group("/v1"), perRoute)
//	v1.Post("/login", login)  // registered as v1.Post("/login", New(perRoute), login)
//	v1.Get("/search", search) // a bucket of its own
//
// Get, Head, Post, Put, Delete, Connect, Options, Trace, Patch, Add and All
// register the route with New(l)'s handler in front of its handlers; Group
// and Route return Routers that do the same for their routes. Use, Static,
// Mount and Name are r's own: a Use middleware, static files and a mounted
// app are not limited by it (mount New(l) on them where they need a limit).
func Routes(r fiber.Router, l *limit.Limiter) fiber.Router {
	return &routes{Router: r, h: New(l)}
}

// routes is the Router of Routes: r with the handler h put in front of
// every route's handlers.
type routes struct {
	fiber.Router
	h fiber.Handler
}

func (w *routes) with(hs []fiber.Handler) []fiber.Handler {
	return append([]fiber.Handler{w.h}, hs...)
}

func (w *routes) Get(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Get(path, w.with(hs)...)
	return w
}

func (w *routes) Head(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Head(path, w.with(hs)...)
	return w
}

func (w *routes) Post(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Post(path, w.with(hs)...)
	return w
}

func (w *routes) Put(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Put(path, w.with(hs)...)
	return w
}

func (w *routes) Delete(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Delete(path, w.with(hs)...)
	return w
}

func (w *routes) Connect(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Connect(path, w.with(hs)...)
	return w
}

func (w *routes) Options(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Options(path, w.with(hs)...)
	return w
}

func (w *routes) Trace(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Trace(path, w.with(hs)...)
	return w
}

func (w *routes) Patch(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Patch(path, w.with(hs)...)
	return w
}

func (w *routes) Add(method, path string, hs ...fiber.Handler) fiber.Router {
	w.Router.Add(method, path, w.with(hs)...)
	return w
}

func (w *routes) All(path string, hs ...fiber.Handler) fiber.Router {
	w.Router.All(path, w.with(hs)...)
	return w
}

func (w *routes) Group(prefix string, hs ...fiber.Handler) fiber.Router {
	return &routes{Router: w.Router.Group(prefix, hs...), h: w.h}
}

func (w *routes) Route(prefix string, fn func(fiber.Router), name ...string) fiber.Router {
	return &routes{Router: w.Router.Route(prefix, func(r fiber.Router) { fn(&routes{Router: r, h: w.h}) }, name...), h: w.h}
}

func (w *routes) Use(args ...any) fiber.Router {
	w.Router.Use(args...)
	return w
}

func (w *routes) Static(prefix, root string, config ...fiber.Static) fiber.Router {
	w.Router.Static(prefix, root, config...)
	return w
}

func (w *routes) Mount(prefix string, app *fiber.App) fiber.Router {
	w.Router.Mount(prefix, app)
	return w
}

func (w *routes) Name(name string) fiber.Router {
	w.Router.Name(name)
	return w
}

// Unmatched returns a fiber handler for the requests no route matches,
// which fiber answers 404 Not Found or 405 Method Not Allowed: mount it with
// app.Use after every route. A request reaches it only when no route
// before it answered, so the adapter tells the engine that no route matched
// (limit.Request.Unmatched): it counts in l's Shared bucket. When allowed it
// continues with c.Next(), so that fiber answers as usual (404, or 405 when
// the path has routes for other methods); when limited it returns the
// engine's response.
//
// This is how a global limit mounted at route level (where PerRoute
// buckets and the metrics' handler label work) also limits scanners:
//
//	global := fiberlimit.New(l)
//	app.Get("/v1/notes/:id", global, notes)
//	app.Post("/v1/login", global, fiberlimit.New(login), loginHandler)
//	app.Use(fiberlimit.Unmatched(l)) // last: 404s and 405s count in l's bucket
//
// A global app.Use(New(l)) in front of the routes sees every request
// already (unmatched ones included, as requests whose route it cannot see)
// and needs no Unmatched mount. Routes registered after an Unmatched mount
// are reached through it, and would count twice with a route-level mount of
// the same Limiter: register it last. Fiber answers a method outside
// Config.RequestMethods (e.g. FOO) with 400 before running any handler, so
// no mount sees those requests.
func Unmatched(l *limit.Limiter) fiber.Handler {
	return func(c *fiber.Ctx) error {
		return serve(l, c, "", true)
	}
}

// request is the engine's view of c. fasthttp reuses the buffers behind
// c.Method() and c.Path() for the next request: they are copied, since the
// Request may outlive the handler (a KeyFunc, CostFunc or Observer may keep
// its strings).
// serve decides c with l, continues with c.Next() when allowed and then
// settles the request (limit.Limiter.Finish): a request that a later mount
// limited gives this mount's charge back, and a policy with CountStatus gives
// it back when it does not count the status (the response's, or when the
// chain returned an error, the status fiber's default ErrorHandler answers
// it with: a *fiber.Error's Code, else 500). A handler that panics leaves
// the request counted (and gives its
// Concurrency slots back).
func serve(l *limit.Limiter, c *fiber.Ctx, route string, unmatched bool) error {
	ctx := c.UserContext()
	gone := connctx.New(ctx, c.Context().Conn()) // fasthttp never says the client left
	d := l.Check(gone, request(c, route, unmatched), (*response)(c))
	gone.End()
	if !d.Allowed {
		return nil
	}
	defer l.Finish(ctx, &d, 0) // a panic: a Concurrency slot is given back, a charge stays
	err := c.Next()
	l.Finish(ctx, &d, status(c, err))
	return err
}

// status is the status fiber answers c with after the chain returned err.
func status(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	if fe, ok := errors.AsType[*fiber.Error](err); ok {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

func request(c *fiber.Ctx, route string, unmatched bool) limit.Request {
	fc := c.Context()
	return limit.Request{
		Route:     route,
		Unmatched: unmatched,
		Method:    method(c.Method()),
		Path:      strings.Clone(c.Path()),
		Peer:      peer(fc),
		Header:    (*header)(&fc.Request.Header),
		Native:    c,
	}
}

// routeSet remembers, for each fiber.Route a handler ran in, the template
// the engine gets: the route's registered path, or "" for a Use mount.
// Routes come from the app's configuration: the set stays small and is
// written once per route, which is what sync.Map is for (lock-free reads,
// no allocation for a pointer key). first short-cuts the map for the first
// route seen, which for a global mount is the usual one (the route of the
// mount for GET): an atomic load and a pointer comparison.
type routeSet struct {
	first atomic.Pointer[routeTemplate]
	m     sync.Map // *fiber.Route -> *routeTemplate
}

type routeTemplate struct {
	r *fiber.Route
	t string
}

// template returns the route template of the route c is executing, or ""
// in a Use mount, where that route is the mount's own prefix, not the
// matched route. Route.Path is the string the route was registered with,
// owned by the app for its lifetime (not a request buffer), so it needs no
// copy.
func (rs *routeSet) template(c *fiber.Ctx) string {
	r := c.Route()
	if len(r.Handlers) == 0 {
		return "" // fiber's stand-in route outside any route (its error handler)
	}
	if f := rs.first.Load(); f != nil && f.r == r {
		return f.t
	}
	if v, ok := rs.m.Load(r); ok {
		return v.(*routeTemplate).t
	}
	rt := &routeTemplate{r: r, t: r.Path}
	if isUse(c.App(), r) {
		rt.t = ""
	}
	rs.m.Store(r, rt)
	rs.first.CompareAndSwap(nil, rt)
	return rt.t
}

// isUse reports whether r is the route of a Use mount (app.Use, Group.Use,
// app.Group with handlers). Fiber marks those with an unexported field only,
// but its public App.GetRoutes(true) lists every route except them, and a
// listed route runs the same handlers as r exactly when it is r (or its
// HEAD/GET twin): their Handlers share one backing array, which fiber never
// shares between a Use mount and a route unless the application passes one
// slice to both (app.Group(p, hs...) and app.Get(p, hs...)). It is called
// once per route (routeSet remembers).
func isUse(app *fiber.App, r *fiber.Route) bool {
	for _, route := range app.GetRoutes(true) {
		if len(route.Handlers) > 0 && &route.Handlers[0] == &r.Handlers[0] && route.Path == r.Path {
			return false
		}
	}
	return true
}

// methods are fiber's constants for the standard methods.
var methods = [...]string{fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch,
	fiber.MethodDelete, fiber.MethodOptions, fiber.MethodConnect, fiber.MethodTrace}

// method returns m as one of fiber's method constants when it is a standard
// method (no allocation), else a copy.
func method(m string) string {
	for _, s := range methods {
		if m == s {
			return s
		}
	}
	return strings.Clone(m)
}

// peer returns the socket peer address ("" when the connection has none),
// never a forwarding header: c.IP() would read ProxyHeader's first value
// when one is configured. fasthttp reports a non-TCP peer as 0.0.0.0, which
// the engine treats as no address (the fallback bucket).
func peer(fc *fasthttp.RequestCtx) string {
	ip := fc.RemoteIP()
	if ip == nil {
		return ""
	}
	return ip.String() // a new string, not a request buffer
}

// header is limit.Header over fasthttp's request header. Converting the
// *fasthttp.RequestHeader pointer to *header and storing it in the Request
// does not allocate; Values, which does, is called only when a trusted
// client-address header is configured.
type header fasthttp.RequestHeader

// Values returns every line of the named header (case-insensitive), in
// order, as copies that stay valid after the request.
func (h *header) Values(name string) []string {
	var out []string
	(*fasthttp.RequestHeader)(h).VisitAll(func(k, v []byte) {
		if len(k) == len(name) && strings.EqualFold(string(k), name) {
			out = append(out, string(v))
		}
	})
	return out
}

// response is limit.ResponseWriter over the request's fiber context: the
// engine decides every field, status and body, and response only stores
// them the fasthttp way in c.Response(). It also carries the per-request
// flag that stacked mounts share (SetLimited, Limited: c.Locals). The
// pointer conversion does not allocate.
type response fiber.Ctx

var (
	_ limit.ResponseWriter = (*response)(nil)
	_ limit.Header         = (*header)(nil)
)

func (r *response) resp() *fasthttp.Response { return (*fiber.Ctx)(r).Response() }

// Get returns the first value of name ("" when absent). It allocates a copy;
// the engine calls it only to merge the fields of two mounts.
func (r *response) Get(name string) string {
	return string(r.resp().Header.Peek(name))
}

// Set replaces every value of name; fasthttp copies name and value.
func (r *response) Set(name, value string) { r.resp().Header.Set(name, value) }

// Add appends a value of name; fasthttp copies name and value.
func (r *response) Add(name, value string) { r.resp().Header.Add(name, value) }

// Send sets the status and the body (SetBody copies: the engine's body is
// shared). A bodiless response (DiscloseNone) carries no Content-Type, as
// in the net/http adapters, although fasthttp would add text/plain.
func (r *response) Send(status int, body []byte) {
	fr := r.resp()
	fr.SetStatusCode(status)
	if len(body) > 0 {
		fr.SetBody(body)
		return
	}
	fr.ResetBody()
	fr.Header.SetNoDefaultContentType(true)
}

// limitedKey is the c.Locals key of the flag a limiting mount sets.
type limitedKey struct{}

// SetLimited flags the request as limited by a mount, so that the mounts
// that charged it earlier give their charges back (limit.Limiter.Finish).
func (r *response) SetLimited() { (*fiber.Ctx)(r).Locals(limitedKey{}, true) }

// Limited reports whether a mount limited the request.
func (r *response) Limited() bool { return (*fiber.Ctx)(r).Locals(limitedKey{}) != nil }

// KeyFunc adapts a key function over *fiber.Ctx to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user: limit.KeyFuncOf, which explains
// blank results, errors, panics and a key function mounted under another
// framework. The result may point into fasthttp's buffers (c.Get): the
// engine copies it before the call returns. The context is valid only
// during the call.
func KeyFunc(f func(c *fiber.Ctx) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over *fiber.Ctx to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c *fiber.Ctx) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over the *fiber.Ctx to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(c *fiber.Ctx) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
