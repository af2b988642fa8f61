package echolimit

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns echo middleware that decides every request with l
// (limit.Limiter.CheckHTTP, with the route template c.Path() and the
// echo.Context as the native context). Allowed requests reach next with the
// engine's header fields added (none at the default disclosure) and keep
// next's status, body and error; limited requests get the engine's response
// (429 with Retry-After and an RFC 9457 body by default), next is not called
// and nil is returned; requests the policy skips reach next untouched. Safe
// for concurrent use; l may be shared by several mounts, which then draw on
// the same buckets.
//
// A request no route serves (echo answers 404 or 405, through its own
// handlers or a RouteNotFound catch-all such as the one a Group with
// middleware registers) is passed to the engine as unmatched
// (limit.Request.Unmatched): it counts in the Shared bucket.
//
// When next returns, it settles the request (limit.Limiter.Finish): a
// request that a later mount limited (a route or group mount under e.Use)
// gives this mount's charge back, and a policy with CountStatus gives it
// back when it does not count the status: c.Response().Status, or when next
// returned an error before writing, the status echo's default error handler
// gives it (an *echo.HTTPError's Code, else 500; a custom HTTPErrorHandler
// that answers otherwise is not seen). A handler that panics leaves the
// request counted (and gives its
// Concurrency slots back).
//
// By default a limited request is answered by the middleware itself, with
// the engine's exact bytes, and echo's HTTPErrorHandler is not involved;
// with WithHTTPError the denial is returned as an *echo.HTTPError for the
// application's HTTPErrorHandler to write.
func Middleware(l *limit.Limiter, opts ...Option) echo.MiddlewareFunc {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	rt := &routeTable{}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := c.Path()
			known := limit.Request{Route: p, Unmatched: rt.unmatched(c, p), Native: c}
			if cfg.httpError {
				return checkToError(l, c, next, known)
			}
			d := l.CheckHTTP(c.Response(), c.Request(), known)
			if !d.Allowed {
				return nil
			}
			defer l.Finish(c.Request().Context(), &d, 0) // a panic: a Concurrency slot is given back, a charge stays
			err := next(c)
			l.Finish(c.Request().Context(), &d, status(c, err))
			return err
		}
	}
}

// Option configures Middleware.
type Option func(*config)

type config struct {
	httpError bool
}

// WithHTTPError makes the middleware return a denial as an *echo.HTTPError
// instead of writing the response itself, so that the application's
// HTTPErrorHandler writes it (and the middleware that sees returned errors,
// a logger for one, sees it): the echo way, as echo's own rate limiter does.
//
// The error's Code is the engine's status (429, or 503 under FailClosed);
// its Message is the engine's body, as a json.RawMessage when the body is
// JSON (the default RFC 9457 problem document) or else a string; its
// Internal is ErrLimited, so errors.Is(err, echolimit.ErrLimited) tells a
// denial from other errors. The engine's header fields (Retry-After,
// RateLimit, RateLimit-Policy) are set on c.Response() before it returns;
// Content-Type and Content-Length are left to the handler that writes the
// body. echo's DefaultHTTPErrorHandler writes the problem document as
// application/json (compacted, with a trailing newline), and a HEAD request
// with no body. A denial allocates the error and a copy of the body; an
// allowed request nothing more than without the option.
func WithHTTPError() Option {
	return func(c *config) { c.httpError = true }
}

// ErrLimited is the Internal error of the *echo.HTTPError that a denial is
// returned as under WithHTTPError.
var ErrLimited = errors.New("echolimit: request limited")

// checkToError decides c as Middleware does, with the limited response
// captured instead of written and returned as an *echo.HTTPError.
func checkToError(l *limit.Limiter, c echo.Context, next echo.HandlerFunc, known limit.Request) error {
	w := captures.Get().(*capture)
	w.h, w.status, w.body = c.Response().Header(), 0, w.body[:0]
	d := l.CheckHTTP(w, c.Request(), known)
	if d.Allowed {
		w.h = nil
		captures.Put(w)
		defer l.Finish(c.Request().Context(), &d, 0) // a panic: a Concurrency slot is given back, a charge stays
		err := next(c)
		l.Finish(c.Request().Context(), &d, status(c, err))
		return err
	}
	h := w.h
	ct := h.Get(echo.HeaderContentType)
	h.Del(echo.HeaderContentType)
	h.Del(echo.HeaderContentLength)
	he := &echo.HTTPError{Code: w.status, Message: http.StatusText(w.status), Internal: ErrLimited}
	if len(w.body) > 0 {
		if isJSON(ct) {
			he.Message = json.RawMessage(append([]byte(nil), w.body...))
		} else {
			he.Message = string(w.body)
		}
	}
	w.h = nil
	captures.Put(w)
	return he
}

// isJSON reports whether media type ct is JSON (application/json or a
// +json suffix such as application/problem+json).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// capture is the http.ResponseWriter that WithHTTPError hands the engine:
// header fields go into the echo response's header map, the status and
// body of a limited request are kept for the error.
type capture struct {
	h      http.Header
	status int
	body   []byte
}

var captures = sync.Pool{New: func() any { return new(capture) }}

func (w *capture) Header() http.Header         { return w.h }
func (w *capture) WriteHeader(status int)      { w.status = status }
func (w *capture) Write(b []byte) (int, error) { w.body = append(w.body, b...); return len(b), nil }

// status is the status of the response to c: what the handler wrote, or
// when it returned an error before writing, the status echo's default
// error handler (Echo.DefaultHTTPErrorHandler) answers it with: the Code
// of an *echo.HTTPError returned as is, or of the *echo.HTTPError in its
// Internal field; 500 for any other error, a wrapped *echo.HTTPError
// included (echo does not unwrap it).
func status(c echo.Context, err error) int {
	r := c.Response()
	if err == nil || r.Committed {
		return r.Status
	}
	he, ok := err.(*echo.HTTPError)
	if !ok {
		return http.StatusInternalServerError
	}
	if in, ok := he.Internal.(*echo.HTTPError); ok {
		return in.Code
	}
	return he.Code
}

// routeTable knows, for each route path of an *echo.Echo, the methods
// registered on it (RouteNotFound catch-alls excluded), so that a request
// echo routed to a catch-all or answers 405 for is told from a served one.
// Paths come from the application's routes, never from the request, so the
// table stays as small as the route list. Reads are lock-free (an immutable
// map behind an atomic pointer); a path not seen yet rebuilds it from
// Echo.Routes and Echo.Routers, once.
type routeTable struct {
	t  atomic.Pointer[routes]
	mu sync.Mutex
}

type routes struct {
	e       *echo.Echo
	methods map[string][]string // path -> methods; a nil slice: a path echo did not list (assumed served)
}

// unmatched reports whether echo serves no route for c: the path is empty
// (echo found nothing), or no route of the request's method is registered
// on it (a 405, echo's automatic OPTIONS answer, or a RouteNotFound
// catch-all).
func (rt *routeTable) unmatched(c echo.Context, path string) bool {
	if path == "" {
		return true
	}
	e := c.Echo()
	t := rt.t.Load()
	var ms []string
	ok := false
	if t != nil && t.e == e {
		ms, ok = t.methods[path]
	}
	if !ok {
		ms = rt.rebuild(e, path).methods[path]
	}
	if ms == nil {
		return false
	}
	method := c.Request().Method
	for _, m := range ms {
		if m == method {
			return false
		}
	}
	return true
}

func (t *routes) has(path string) bool {
	_, ok := t.methods[path]
	return ok
}

// rebuild lists every route of e again (routes may be added after the
// middleware was built) and records path, which must be in the result.
func (rt *routeTable) rebuild(e *echo.Echo, path string) *routes {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t := rt.t.Load(); t != nil && t.e == e && t.has(path) {
		return t
	}
	t := &routes{e: e, methods: map[string][]string{}}
	add := func(rs []*echo.Route) {
		for _, r := range rs {
			ms, ok := t.methods[r.Path]
			if !ok {
				ms = []string{}
			}
			if r.Method != echo.RouteNotFound {
				ms = append(ms, r.Method)
			}
			t.methods[r.Path] = ms
		}
	}
	add(e.Routes())
	for _, r := range e.Routers() {
		add(r.Routes())
	}
	if !t.has(path) {
		t.methods[path] = nil
	}
	rt.t.Store(t)
	return t
}

// KeyFunc adapts a key function over echo.Context to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user: limit.KeyFuncOf, which explains
// blank results, errors, panics and a key function mounted under another
// framework. The context is valid only during the call: do not keep it.
func KeyFunc(f func(c echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over echo.Context to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c echo.Context) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over the echo.Context to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(c echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
