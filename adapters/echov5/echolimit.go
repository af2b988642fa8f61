package echolimit

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v5"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns echo middleware that decides every request with l
// (limit.Limiter.CheckHTTP, with the route template c.Path() and the
// *echo.Context as the native context). Allowed requests reach next with
// the engine's header fields added (none at the default disclosure) and
// keep next's status, body and error; limited requests get the engine's
// response (429 with Retry-After and an RFC 9457 body by default), next is
// not called and nil is returned; requests the policy skips reach next
// untouched. Safe for concurrent use; l may be shared by several mounts,
// which then draw on the same buckets.
//
// A request no route serves (echo answers 404 or 405, through its own
// handlers or a RouteNotFound catch-all such as the one a Group with
// middleware registers) is passed to the engine as unmatched
// (limit.Request.Unmatched): it counts in the Shared bucket.
//
// When next returns, it settles the request (limit.Limiter.Finish): a
// request that a later mount limited (a route or group mount under e.Use)
// gives this mount's charge back, and a policy with CountStatus gives it
// back when it does not count the status echo.ResolveResponseStatus gives:
// the committed status, or when next returned an error before writing, the
// error's echo.StatusCode (500 when it has none), as echo's default error
// handler answers it (a custom HTTPErrorHandler that answers otherwise is
// not seen). A handler that panics leaves the request counted (and gives its
// Concurrency slots back).
//
// By default a limited request is answered by the middleware itself, with
// the engine's exact bytes, and echo's HTTPErrorHandler is not involved;
// with WithHTTPError the denial is returned as a *LimitedError for the
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
		return func(c *echo.Context) error {
			p := c.Path()
			known := limit.Request{Route: p, Unmatched: rt.unmatched(c, p), Native: c}
			if cfg.httpError {
				return checkToError(l, c, next, known)
			}
			d := l.CheckHTTP(c.Response(), c.Request(), known)
			if !d.Allowed {
				return nil
			}
			return finish(l, c, next, &d)
		}
	}
}

// finish runs next for an allowed request and settles it.
func finish(l *limit.Limiter, c *echo.Context, next echo.HandlerFunc, d *limit.Decision) error {
	defer l.Finish(c.Request().Context(), d, 0) // a panic: a Concurrency slot is given back, a charge stays
	err := next(c)
	_, status := echo.ResolveResponseStatus(c.Response(), err)
	l.Finish(c.Request().Context(), d, status)
	return err
}

// Option configures Middleware.
type Option func(*config)

type config struct {
	httpError bool
}

// WithHTTPError makes the middleware return a denial as a *LimitedError
// instead of writing the response itself, so that the application's
// HTTPErrorHandler writes it (and the middleware that sees returned errors,
// a logger for one, sees it): the echo way, as echo's own rate limiter
// returns its denials.
//
// The engine's header fields (Retry-After, RateLimit, RateLimit-Policy) are
// set on c.Response() before it returns; Content-Type and Content-Length are
// left to the handler that writes the body. echo's default HTTPErrorHandler
// (echo.DefaultHTTPErrorHandler) answers with the error's StatusCode and
// writes it as JSON through its MarshalJSON: the problem document as
// application/json (compacted, with a trailing newline), and a HEAD request
// with no body. A denial allocates the error and a copy of the body; an
// allowed request nothing more than without the option.
func WithHTTPError() Option {
	return func(c *config) { c.httpError = true }
}

// ErrLimited is what a *LimitedError unwraps to: errors.Is(err,
// echolimit.ErrLimited) tells a denial from other errors.
var ErrLimited = errors.New("echolimit: request limited")

// LimitedError is a denial returned under WithHTTPError: the engine's
// limited response as an error that echo's error handling understands. It
// implements echo.HTTPStatusCoder (StatusCode, so echo.StatusCode(err) is
// the engine's status) and json.Marshaler (so echo's default
// HTTPErrorHandler writes the body), and unwraps to ErrLimited.
type LimitedError struct {
	// Status is the engine's status: 429, or 503 under FailClosed.
	Status int
	// Body is the engine's body, the RFC 9457 problem document by default
	// (nil for a bodiless response, DiscloseNone).
	Body []byte
	// ContentType is the body's media type ("application/problem+json" for
	// the problem document).
	ContentType string
}

// Error describes the denial with its status.
func (e *LimitedError) Error() string {
	return "echolimit: request limited: " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
}

// StatusCode returns the engine's status (echo.HTTPStatusCoder).
func (e *LimitedError) StatusCode() int { return e.Status }

// Unwrap returns ErrLimited.
func (e *LimitedError) Unwrap() error { return ErrLimited }

// MarshalJSON returns the body when it is JSON (the problem document), else
// {"message": body}, as echo writes an *echo.HTTPError, or the status text
// when there is no body.
func (e *LimitedError) MarshalJSON() ([]byte, error) {
	if len(e.Body) > 0 && isJSON(e.ContentType) && json.Valid(e.Body) {
		return e.Body, nil
	}
	msg := string(e.Body)
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return json.Marshal(map[string]string{"message": msg})
}

// checkToError decides c as Middleware does, with the limited response
// captured instead of written and returned as a *LimitedError.
func checkToError(l *limit.Limiter, c *echo.Context, next echo.HandlerFunc, known limit.Request) error {
	w := captures.Get().(*capture)
	w.h, w.status, w.body = c.Response().Header(), 0, w.body[:0]
	d := l.CheckHTTP(w, c.Request(), known)
	if d.Allowed {
		w.h = nil
		captures.Put(w)
		return finish(l, c, next, &d)
	}
	h := w.h
	le := &LimitedError{Status: w.status, ContentType: h.Get(echo.HeaderContentType)}
	if len(w.body) > 0 {
		le.Body = append([]byte(nil), w.body...)
	}
	h.Del(echo.HeaderContentType)
	h.Del(echo.HeaderContentLength)
	w.h = nil
	captures.Put(w)
	return le
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

// routeTable knows, for an *echo.Echo, which route paths carry a
// RouteNotFound catch-all (e.RouteNotFound, or the two a Group with
// middleware registers), so that the context's RouteInfo, which echo
// copies on every call, is read only for those paths. Paths come from the
// application's routes, never from the request, so the table stays as
// small as the route list. Reads are lock-free (an immutable map behind an
// atomic pointer); a path not seen yet rebuilds it from the router's
// Routes, once.
type routeTable struct {
	t  atomic.Pointer[routes]
	mu sync.Mutex
}

type routes struct {
	e        *echo.Echo
	catchAll map[string]bool // route path (as c.Path() spells it) -> a RouteNotFound route has it
}

// unmatched reports whether echo serves no route for c: the path is empty
// (echo found no route), echo's router set the Allow value it sets when
// it has no route for the request's method (its 405 and automatic OPTIONS
// answers, which echo's CORS middleware reads the same way), or the route
// echo chose is a RouteNotFound catch-all.
func (rt *routeTable) unmatched(c *echo.Context, path string) bool {
	if path == "" || c.Get(echo.ContextKeyHeaderAllow) != nil {
		return true
	}
	e := c.Echo()
	t := rt.t.Load()
	catchAll, ok := false, false
	if t != nil && t.e == e {
		catchAll, ok = t.catchAll[path]
	}
	if !ok {
		catchAll = rt.rebuild(e, path).catchAll[path]
	}
	return catchAll && c.RouteInfo().Method == echo.RouteNotFound
}

// rebuild lists every route of e again (routes may be added after the
// middleware was built) and records path, which must be in the result.
func (rt *routeTable) rebuild(e *echo.Echo, path string) *routes {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t := rt.t.Load(); t != nil && t.e == e {
		if _, ok := t.catchAll[path]; ok {
			return t
		}
	}
	t := &routes{e: e, catchAll: map[string]bool{path: false}}
	for _, r := range e.Router().Routes() {
		p := routePath(r.Path)
		t.catchAll[p] = t.catchAll[p] || r.Method == echo.RouteNotFound
	}
	rt.t.Store(t)
	return t
}

// routePath spells a registered route path as echo's router gives it to
// c.Path(): with a leading slash ("" is "/").
func routePath(p string) string {
	if p == "" || p[0] != '/' {
		return "/" + p
	}
	return p
}

// KeyFunc adapts a key function over *echo.Context to Policy.KeyFunc, e.g.
// to limit by API key or authenticated user: limit.KeyFuncOf, which
// explains blank results, errors, panics and a key function mounted under
// another framework. Echo reuses the context for later requests once the
// handler returns: do not keep it.
func KeyFunc(f func(c *echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over *echo.Context to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c *echo.Context) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over *echo.Context to Policy.Plan, e.g.
// to choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(c *echo.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
