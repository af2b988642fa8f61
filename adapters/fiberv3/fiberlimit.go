package fiberlimit

import (
	"errors"
	"strings"

	"github.com/gofiber/fiber/v3"
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
// The route template is c.FullPath() at route level (app.Get(path, New(l),
// h)), once fiber has matched a route (c.Matched()). In a Use mount in front
// of the routes (app.Use, Group.Use, app.Group(prefix, New(l))) no route is
// matched yet: when l's bucket is the route (a PerRoute policy:
// limit.Limiter.BucketsByRoute), the handler finds the route fiber will
// serve after the mount, with fiber.RoutePatternMatch over the app's routes
// for the request's method in fiber's order, so that each route has the
// bucket a route-level mount would give it, and a request no route matches
// counts as unmatched (see the package documentation). For any other
// Limiter the route changes no bucket and is not looked up: the template is
// "" there (the metrics' handler label is empty). Routes mounts l at route
// level on every route of a group.
func New(l *limit.Limiter) fiber.Handler {
	var next *ahead
	if l.BucketsByRoute() {
		next = new(ahead)
	}
	return func(c fiber.Ctx) error {
		if c.Matched() {
			return serve(l, c, c.FullPath(), false)
		}
		if next == nil {
			return serve(l, c, "", false)
		}
		route, unmatched := next.find(c)
		return serve(l, c, route, unmatched)
	}
}

// Unmatched returns a fiber handler for the requests no route serves,
// which fiber answers 404 Not Found or 405 Method Not Allowed: mount it with
// app.Use after every route. It lets the request go on first (c.Next()):
// when a route registered after it serves the request (fiber registers its
// automatic HEAD routes for GET routes after every other route and mount,
// so every HEAD request to a GET route passes an Unmatched mount first),
// it does nothing, and the route's own mounts count the request. Otherwise
// no route matched (c.Matched() is false) and fiber has not answered yet:
// the adapter tells the engine so (limit.Request.Unmatched), the request
// counts in l's Shared bucket, and when allowed fiber answers as usual
// (404, or 405 when the path has routes for other methods); when limited
// the engine's response replaces fiber's answer (without its Allow field).
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
// and needs no Unmatched mount. Fiber answers a method outside
// Config.RequestMethods (e.g. FOO) with 501 Not Implemented before running
// any handler, so no mount sees those requests.
func Unmatched(l *limit.Limiter) fiber.Handler {
	return func(c fiber.Ctx) error {
		err := c.Next()
		if c.Matched() {
			return err
		}
		ctx := c.Context()
		fc := c.RequestCtx()
		d := l.Check(ctx, request(c, fc, "", true), (*response)(fc))
		if !d.Allowed {
			fc.Response.Header.Del(fiber.HeaderAllow)
			return nil
		}
		l.Finish(ctx, &d, status(fc, err))
		return err
	}
}

// serve decides c with l, continues with c.Next() when allowed and then
// settles the request (limit.Limiter.Finish): a request that a later mount
// limited gives this mount's charge back, and a policy with CountStatus gives
// it back when it does not count the status (the response's, or when the
// chain returned an error, the status fiber's DefaultErrorHandler answers
// it with: the Code of a *fiber.Error in the error's chain, else 500). A
// handler that panics leaves the request counted (and gives its
// Concurrency slots back).
func serve(l *limit.Limiter, c fiber.Ctx, route string, unmatched bool) error {
	ctx := c.Context()
	fc := c.RequestCtx()
	gone := connctx.New(ctx, fc.Conn()) // fasthttp never says the client left
	d := l.Check(gone, request(c, fc, route, unmatched), (*response)(fc))
	gone.End()
	if !d.Allowed {
		return nil
	}
	defer l.Finish(ctx, &d, 0) // a panic: a Concurrency slot is given back, a charge stays
	err := c.Next()
	l.Finish(ctx, &d, status(fc, err))
	return err
}

// status is the status fiber answers with after the chain returned err.
func status(fc *fasthttp.RequestCtx, err error) int {
	if err == nil {
		return fc.Response.StatusCode()
	}
	if fe, ok := errors.AsType[*fiber.Error](err); ok {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// request is the engine's view of c. fasthttp reuses the buffers behind
// c.Path() and the header values for the next request: the path is copied
// and the header view copies what it returns, since the Request may outlive
// the handler (a KeyFunc, CostFunc or Observer may keep its strings).
// c.Method() is one of the app's Config.RequestMethods strings, owned by the
// app, and the route template is the route's registered path, also the
// app's: neither needs a copy.
func request(c fiber.Ctx, fc *fasthttp.RequestCtx, route string, unmatched bool) limit.Request {
	return limit.Request{
		Route:     route,
		Unmatched: unmatched,
		Method:    c.Method(),
		Path:      strings.Clone(c.Path()),
		Peer:      peer(fc),
		Header:    (*header)(&fc.Request.Header),
		Native:    c,
	}
}

// peer returns the socket peer address ("" when the connection has none),
// never a forwarding header: c.IP() would read ProxyHeader's value when
// TrustProxy is configured. fasthttp reports a non-TCP peer as 0.0.0.0,
// which the engine treats as no address (the fallback bucket).
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
	for k, v := range (*fasthttp.RequestHeader)(h).All() {
		if len(k) == len(name) && strings.EqualFold(string(k), name) {
			out = append(out, string(v))
		}
	}
	return out
}

// response is limit.ResponseWriter over the request's fasthttp context: the
// engine decides every field, status and body, and response only stores
// them the fasthttp way in its Response. It also carries the per-request
// flag that stacked mounts share (SetLimited, Limited: a user value, where
// fiber keeps c.Locals). The pointer conversion does not allocate; fiber.Ctx
// is an interface, so the adapter works with fiber's DefaultCtx and with an
// app's custom context alike.
type response fasthttp.RequestCtx

var (
	_ limit.ResponseWriter = (*response)(nil)
	_ limit.Header         = (*header)(nil)
)

func (r *response) resp() *fasthttp.Response { return &(*fasthttp.RequestCtx)(r).Response }

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
func (r *response) SetLimited() { (*fasthttp.RequestCtx)(r).SetUserValue(limitedKey{}, true) }

// Limited reports whether a mount limited the request.
func (r *response) Limited() bool { return (*fasthttp.RequestCtx)(r).UserValue(limitedKey{}) != nil }

// KeyFunc adapts a key function over fiber.Ctx to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user: limit.KeyFuncOf, which explains
// blank results, errors, panics and a key function mounted under another
// framework. The result may point into fasthttp's buffers (c.Get): the
// engine copies it before the call returns. The context is valid only
// during the call.
func KeyFunc(f func(c fiber.Ctx) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over fiber.Ctx to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c fiber.Ctx) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over fiber.Ctx to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework. The result may point into fasthttp's buffers (c.Get): the
// engine copies it before the call returns.
func PlanFunc(f func(c fiber.Ctx) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
