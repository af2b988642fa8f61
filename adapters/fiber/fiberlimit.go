package fiberlimit

import (
	"reflect"
	"strings"

	"github.com/gofiber/fiber/v2"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/valyala/fasthttp"
)

// New returns a fiber handler that decides every request with l. Allowed
// requests continue with c.Next() after the engine's header fields are added
// (none at the default disclosure), and keep the handlers' status, body and
// error; denied requests get the engine's denial (429 with Retry-After and an
// RFC 9457 body by default), c.Next() is not called and nil is returned, so
// fiber's ErrorHandler is not involved; requests the policy skips continue
// untouched. Safe for concurrent use; l may be shared by several mounts,
// which then draw on the same buckets.
//
// The route template is read only when l.NeedsRoute(): at route level
// (app.Get(path, New(l), h)) it is c.Route().Path; in a Use mount (app.Use,
// Group.Use, app.Group(prefix, New(l))) the matched route is not known yet,
// so it is "": a PerRoute policy falls back to its Shared bucket and reports
// the route-unknown issue, and the metrics' handler label is empty.
func New(l *limit.Limiter) fiber.Handler {
	needRoute := l.NeedsRoute()
	return func(c *fiber.Ctx) error {
		fc := c.Context()
		// fasthttp reuses the buffers behind c.Method() and c.Path() for the
		// next request: copy them, since the Request may outlive this call
		// (a KeyFunc, CostFunc or Observer may keep its strings).
		req := limit.Request{
			Method: method(c.Method()),
			Path:   strings.Clone(c.Path()),
			Peer:   peer(fc),
			Header: (*header)(&fc.Request.Header),
			Native: c,
		}
		if needRoute {
			req.Route = route(c)
		}
		resp := l.Check(c.UserContext(), req)
		// The engine's merge rules (several mounts on one request) apply to
		// fasthttp's header through respHeader, which copies every name and
		// value into fasthttp's own buffers.
		resp.WriteHeadersTo((*respHeader)(&fc.Response.Header))
		if !resp.Denied() {
			return c.Next()
		}
		fc.Response.SetStatusCode(resp.Status)
		if len(resp.Body) > 0 {
			// SetBody copies: the engine's body is shared by every denial.
			fc.Response.SetBody(resp.Body)
		} else {
			// A bodiless denial (DiscloseNone) carries no Content-Type, as in
			// the net/http adapters; fasthttp would add text/plain.
			fc.Response.ResetBody()
			fc.Response.Header.SetNoDefaultContentType(true)
		}
		return nil
	}
}

// useField is the index of fiber.Route's unexported "use" field, true for
// the routes of Use mounts (app.Use, Group.Use, app.Group with handlers), or
// -1 if this fiber version has no such bool field. Fiber exposes no public
// way to tell a Use mount from a route (addRoute overwrites Route.Method with
// the request method, and Route.Path is a plain prefix for both), and reading
// one bool by reflection is exact and allocation-free. Without the field
// every mount counts as a Use mount: PerRoute falls back to Shared, visibly
// (route-unknown), never to a wrong bucket; the tests pin the behaviour.
var useField = func() int {
	f, ok := reflect.TypeFor[fiber.Route]().FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}()

// route returns the template of the route c is executing, or "" in a Use
// mount, where that route is the mount's own prefix, not the matched route.
// Route.Path is the string the route was registered with, owned by the app
// for its lifetime (not a request buffer), so it needs no copy.
func route(c *fiber.Ctx) string {
	r := c.Route()
	if useField < 0 || reflect.ValueOf(r).Elem().Field(useField).Bool() {
		return ""
	}
	return r.Path
}

// method returns m as one of fiber's method constants when it is a standard
// method (no allocation), else a copy.
func method(m string) string {
	switch m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodOptions:
		return fiber.MethodOptions
	case fiber.MethodConnect:
		return fiber.MethodConnect
	case fiber.MethodTrace:
		return fiber.MethodTrace
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

// respHeader is limit.HeaderWriter over fasthttp's response header; the
// pointer conversion does not allocate.
type respHeader fasthttp.ResponseHeader

var (
	_ limit.HeaderWriter = (*respHeader)(nil)
	_ limit.Header       = (*header)(nil)
)

// Get returns the first value of name ("" when absent). It allocates a copy;
// the engine calls it only to merge Triplet or Legacy fields of two mounts.
func (h *respHeader) Get(name string) string {
	return string((*fasthttp.ResponseHeader)(h).Peek(name))
}

// Set replaces every value of name.
func (h *respHeader) Set(name, value string) { (*fasthttp.ResponseHeader)(h).Set(name, value) }

// Add appends a value of name.
func (h *respHeader) Add(name, value string) { (*fasthttp.ResponseHeader)(h).Add(name, value) }

// KeyFunc adapts a key function over *fiber.Ctx to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user. A blank result or an error falls
// through to the client address; a panic is recovered by the engine. The
// result may point into fasthttp's buffers (c.Get): the engine copies it
// before the call returns. The context is valid only during the call.
func KeyFunc(f func(c *fiber.Ctx) (string, error)) limit.KeyFunc {
	return func(req limit.Request) (string, error) {
		c, ok := req.Native.(*fiber.Ctx)
		if !ok {
			return "", nil
		}
		return f(c)
	}
}

// CostFunc adapts a pricing function over *fiber.Ctx to Policy.CostFunc (a
// result <= 0 means the policy's Cost; a panic is recovered by the engine
// and means Cost too).
func CostFunc(f func(c *fiber.Ctx) int64) func(limit.Request) int64 {
	return func(req limit.Request) int64 {
		c, ok := req.Native.(*fiber.Ctx)
		if !ok {
			return 0
		}
		return f(c)
	}
}
