package echolimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
)

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

// A client that leaves while its request's decision waits on a slow store
// releases the decision at once, and the handler does not run.
func TestClientGoneReleasesTheDecision(t *testing.T) { conformance.CheckClientGone(t, harness{}) }

// harness builds an echo server for a conformance App: global limiters with
// e.Use, groups with e.Group(prefix, middleware...), route limiters as route
// middleware.
type harness struct{}

func (harness) Name() string { return "echo" }

func (harness) KeyFunc(name string) func(limit.Request) (string, error) {
	return echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.Request().Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return echolimit.CostFunc(func(c echo.Context) int64 { n, _ := strconv.ParseInt(c.QueryParam(name), 10, 64); return n })
}

func (harness) PlanFunc(name string) func(limit.Request) (string, error) {
	return echolimit.PlanFunc(func(c echo.Context) (string, error) { return c.Request().Header.Get(name), nil })
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	for _, l := range app.Global {
		e.Use(echolimit.Middleware(l))
	}
	mws := func(ls []*limit.Limiter) []echo.MiddlewareFunc {
		var m []echo.MiddlewareFunc
		for _, l := range ls {
			m = append(m, echolimit.Middleware(l))
		}
		return m
	}
	handler := func(rt *conformance.Route) echo.HandlerFunc {
		return func(c echo.Context) error {
			name, value, status, body := rt.Serve()
			c.Response().Header().Set(name, value)
			return c.String(status, body)
		}
	}
	for _, g := range app.Groups {
		grp := e.Group(g.Prefix, mws(g.Limiters)...)
		for _, rt := range g.Routes {
			grp.Add(rt.Method, conformance.ColonPath(rt.Relative(g.Prefix)), handler(rt), mws(rt.Limiters)...)
		}
	}
	for _, rt := range app.Routes {
		e.Add(rt.Method, conformance.ColonPath(rt.Path), handler(rt), mws(rt.Limiters)...)
	}
	conformance.ServeHandler(t, ln, e)
}

func serve(t *testing.T, e *echo.Echo) string {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// routes builds the same API under each kind of echo mount; mount says where
// the limiter goes.
func routes(mount string, mw echo.MiddlewareFunc, h echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	both := []string{http.MethodGet, http.MethodHead}
	switch mount {
	case "echo-use":
		e.Use(mw)
		e.Match(both, "/v1/notes/:id", h)
	case "group-arg":
		e.Group("/v1", mw).Match(both, "/notes/:id", h)
	case "group-use":
		g := e.Group("/v1")
		g.Use(mw)
		g.Match(both, "/notes/:id", h)
	case "route":
		e.Match(both, "/v1/notes/:id", h, mw)
	}
	return e
}

// echo sets c.Path() before any e.Use middleware runs: every mount sees the
// route, spelt echo's way in the handler label.
func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"echo-use", "group-arg", "group-use", "route"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			return serve(t, routes(mount, echolimit.Middleware(l), func(c echo.Context) error { return c.String(http.StatusOK, "note") }))
		})
}

// Requests echo serves with no route (its 404, a group's RouteNotFound
// catch-all, its 405) reach the middleware as unmatched: a PerRoute policy
// counts them in its Shared bucket, with an empty handler label and no
// route-unknown issue.
func TestUnmatchedRoutes(t *testing.T) {
	tests := []struct {
		name, method, path string
		group              bool
		status             int
	}{
		{"root_not_found", "GET", "/nothing", false, http.StatusNotFound},
		{"root_method_not_allowed", "DELETE", "/x", false, http.StatusMethodNotAllowed},
		{"root_unknown_method", "FOO", "/x", false, http.StatusMethodNotAllowed},
		// Under a group, echo routes unmatched paths to the group's catch-all.
		{"group_not_found", "GET", "/g/nothing", true, http.StatusNotFound},
		{"group_method_not_allowed", "DELETE", "/g/x", true, http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &limittest.Recorder{}
			l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
			e := echo.New()
			h := func(c echo.Context) error { return nil }
			if tc.group {
				e.Group("/g", echolimit.Middleware(l)).GET("/x", h)
			} else {
				e.Use(echolimit.Middleware(l))
				e.GET("/x", h)
			}
			r := limittest.Do(t, limittest.ClientFrom("127.0.0.7"), tc.method, serve(t, e)+tc.path)
			if r.Status != tc.status {
				t.Fatalf("status %d, want echo's %d", r.Status, tc.status)
			}
			if got := obs.Last(); got.Bucket != "2p60" || got.Handler != "" {
				t.Fatalf("event %+v, want the Shared bucket \"2p60\" and no handler label", got)
			}
			if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
				t.Fatalf("%d route-unknown issues, want 0", n)
			}
			// A served request still has its route's bucket.
			route := "/x"
			if tc.group {
				route = "/g/x"
			}
			limittest.Do(t, limittest.ClientFrom("127.0.0.7"), "GET", serve(t, e)+route)
			if got := obs.Last(); got.Bucket != route+" 2p60" || got.Handler != route {
				t.Fatalf("served request: event %+v, want the route's bucket", got)
			}
		})
	}
}

// An allowed handler's error still reaches echo's error handler.
func TestHandlerErrorReachesTheErrorHandler(t *testing.T) {
	e := echo.New()
	e.Use(echolimit.Middleware(limittest.MustNew(limittest.NewStore(nil), limit.Policy{})))
	e.GET("/err", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	if r := limittest.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", serve(t, e)+"/err"); r.Status != http.StatusTeapot {
		t.Fatalf("handler error: %d, want 418", r.Status)
	}
}

// Policy.SkipPaths is compared with Request.Path, the decoded r.URL.Path,
// while echo routes on r.URL.RawPath when the client sent one (echo.GetPath).
// "/%68ealth" decodes to "/health", so the limiter skips it (not counted,
// never limited), and echo serves it with the "/:page" handler, which is
// thereby unlimited.
func TestRegressionSkipPathsDecodedPathBypassesLimit(t *testing.T) {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1, SkipPaths: []string{"/health"}})
	var health, page atomic.Int64
	e := echo.New()
	e.Use(echolimit.Middleware(l))
	e.GET("/health", func(c echo.Context) error { health.Add(1); return c.String(200, "ok") })
	e.GET("/:page", func(c echo.Context) error { page.Add(1); return c.String(200, "page") })

	do := func(target string) int { return limittest.Serve(e, http.MethodGet, target, "192.0.2.30:1234").Code }
	if c := do("/about"); c != 200 {
		t.Fatalf("first page: %d", c)
	}
	if c := do("/about"); c != 429 {
		t.Fatalf("second page: %d, want 429", c)
	}
	if c := do("/%68ealth"); c != 429 {
		t.Errorf("GET /%%68ealth: %d (page handler calls %d, health %d); want 429: "+
			"the limit of 1 is used up and echo did not route this to /health", c, page.Load(), health.Load())
	}
}

// echo routes after its Pre middleware (where path rewriting such as
// middleware.RemoveTrailingSlash goes) and before e.Use middleware: a
// limiter on e.Use, as the package documentation says, counts every
// spelling Pre rewrites to POST /v1/login in that route's bucket. (The
// stand-in below does what RemoveTrailingSlash does, without importing
// echo's middleware package and its dependencies.)
func TestPerRouteBucketWhateverTheSpelling(t *testing.T) {
	conformance.CheckSpellings(t, []string{"/v1/login/", "/v1/login//"},
		func(t *testing.T, l *limit.Limiter) string {
			e := echo.New()
			e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error {
					r := c.Request()
					r.URL.Path = "/" + strings.Trim(r.URL.Path, "/")
					return next(c)
				}
			})
			e.Use(echolimit.Middleware(l))
			e.POST("/v1/login", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
			return serve(t, e)
		})
}

// The status a CountStatus policy sees for a handler's error must be the
// one echo's default error handler answers with: it takes the code of an
// *echo.HTTPError returned as is (or of the *echo.HTTPError in its
// Internal), and answers 500 to anything else, a wrapped *echo.HTTPError
// included. The adapter unwrapped it (errors.As): a handler returning
// fmt.Errorf("...: %w", echo.ErrUnauthorized) answered 500 and was settled
// as 401, so a policy counting server errors (>= 500) refunded every one
// of them; and an HTTPError whose Internal is another HTTPError was settled
// with the outer code while the client got the inner one.
func TestRegressionCountStatusSeesTheStatusEchoAnswers(t *testing.T) {
	for path, h := range map[string]echo.HandlerFunc{
		"/wrapped": func(c echo.Context) error { return fmt.Errorf("signin: %w", echo.ErrUnauthorized) },
		"/internal": func(c echo.Context) error {
			return echo.NewHTTPError(http.StatusBadRequest).SetInternal(echo.NewHTTPError(http.StatusServiceUnavailable))
		},
	} {
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Hour,
			CountStatus: func(s int) bool { return s >= 500 }})
		e := echo.New()
		e.Use(echolimit.Middleware(l))
		e.GET(path, h)
		srv := httptest.NewServer(e)
		var got []int
		for range 4 {
			res, err := srv.Client().Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			got = append(got, res.StatusCode)
		}
		srv.Close()
		want := []int{500, 500, 429, 429}
		if path == "/internal" {
			want = []int{503, 503, 429, 429}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("GET %s: %v, want %v (server errors the client saw were settled as another status)", path, got, want)
		}
	}
}

// echoWith is an echo server for GET /v1/notes/:id with l on e.Use, or echo
// alone when l is nil.
func echoWith(l *limit.Limiter) http.Handler {
	e := echo.New()
	if l != nil {
		e.Use(echolimit.Middleware(l))
	}
	e.GET("/v1/notes/:id", func(echo.Context) error { return nil })
	return e
}

// BenchmarkMiddleware measures one allowed request through echo with the
// middleware on e.Use, Shared and PerRoute; "echo-only" is echo alone. Echo
// applies e.Use middleware per request (applyMiddleware in ServeHTTP), so
// any middleware closure costs one allocation there.
func BenchmarkMiddleware(b *testing.B) {
	conformance.BenchmarkMiddleware(b, "echo-only", redistest.Memory, echoWith)
}

// On the allowed path at the default disclosure the only allocation is the
// middleware closure echo builds per request for e.Use middleware.
func TestMiddlewareAllocations(t *testing.T) {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	if got := conformance.AllocsPerRequest(t, echoWith(l)); got > 1 {
		t.Fatalf("%.1f allocations per allowed request, want at most 1 (echo's per-request chain)", got)
	}
	// WithHTTPError adds none on the allowed path (its writer is pooled).
	e := echo.New()
	e.Use(echolimit.Middleware(l, echolimit.WithHTTPError()))
	e.GET("/v1/notes/:id", func(echo.Context) error { return nil })
	if got := conformance.AllocsPerRequest(t, e); got > 1 {
		t.Fatalf("WithHTTPError: %.1f allocations per allowed request, want at most 1 (echo's per-request chain)", got)
	}
}

// serveRecorded serves one request from 192.0.2.1 to e in process.
func serveRecorded(e *echo.Echo, method, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	return w
}

// A denial reaches the application's HTTPErrorHandler only under
// WithHTTPError, as an *echo.HTTPError with the engine's status, its problem
// body and ErrLimited inside, the header fields already on the response; by
// default the middleware writes the engine's response and the handler is
// never called. echo's own DefaultHTTPErrorHandler writes the same problem
// document as JSON.
func TestDenialThroughTheHTTPErrorHandler(t *testing.T) {
	policy := limit.Policy{Name: "notes", Limit: 1, Window: time.Minute}
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "note") }
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0)) // every store at one instant: the same Retry-After

	// The default: the middleware answers; the error handler is not called.
	calls := 0
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) { calls++ }
	e.GET("/n", ok, echolimit.Middleware(limittest.MustNew(limittest.NewStore(clock.Now), policy)))
	serveRecorded(e, "GET", "/n")
	want := serveRecorded(e, "GET", "/n")
	if want.Code != http.StatusTooManyRequests || calls != 0 || want.Header().Get("Content-Type") != "application/problem+json" || want.Header().Get("Retry-After") == "" {
		t.Fatalf("default: %d %v %q, %d error handler calls; want the engine's 429 problem, 0 calls", want.Code, want.Header(), want.Body, calls)
	}

	// WithHTTPError: a custom handler writes the error.
	var got []error
	e = echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		got = append(got, err)
		var he *echo.HTTPError
		if errors.As(err, &he) {
			raw, _ := he.Message.(json.RawMessage)
			_ = c.Blob(he.Code, "application/problem+json", raw)
		}
	}
	e.GET("/n", ok, echolimit.Middleware(limittest.MustNew(limittest.NewStore(clock.Now), policy), echolimit.WithHTTPError()))
	if w := serveRecorded(e, "GET", "/n"); w.Code != http.StatusOK || len(got) != 0 {
		t.Fatalf("WithHTTPError, first request: %d, %d errors; want 200 and none", w.Code, len(got))
	}
	w := serveRecorded(e, "GET", "/n")
	var he *echo.HTTPError
	if len(got) != 1 || !errors.As(got[0], &he) || he.Code != http.StatusTooManyRequests || !errors.Is(got[0], echolimit.ErrLimited) {
		t.Fatalf("WithHTTPError: errors %v; want one *echo.HTTPError 429 wrapping ErrLimited", got)
	}
	if w.Code != want.Code || w.Body.String() != want.Body.String() || w.Header().Get("Retry-After") != want.Header().Get("Retry-After") ||
		w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("WithHTTPError through the custom handler: %d %v %q; want %d %v %q", w.Code, w.Header(), w.Body, want.Code, want.Header(), want.Body)
	}

	// WithHTTPError under echo's default handler: the problem as JSON.
	e = echo.New()
	e.GET("/n", ok, echolimit.Middleware(limittest.MustNew(limittest.NewStore(clock.Now), policy), echolimit.WithHTTPError()))
	serveRecorded(e, "GET", "/n")
	w = serveRecorded(e, "GET", "/n")
	var gotBody, wantBody map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &gotBody); err != nil {
		t.Fatalf("default handler body %q: %v", w.Body, err)
	}
	_ = json.Unmarshal(want.Body.Bytes(), &wantBody)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") ||
		fmt.Sprint(gotBody) != fmt.Sprint(wantBody) {
		t.Fatalf("WithHTTPError through echo's default handler: %d %v %q; want 429, Retry-After, application/json %q", w.Code, w.Header(), w.Body, want.Body)
	}
}

// Under WithHTTPError stacked mounts still give the outer charge back when
// the inner mount limits the request: the flag lives in the request.
func TestHTTPErrorDenialRefundsEarlierMounts(t *testing.T) {
	rec := &limittest.Recorder{}
	store := limittest.NewStore(nil)
	global := limittest.MustNew(store, limit.Policy{Name: "global", Limit: 10, Window: time.Minute}, limit.WithObserver(rec))
	login := limittest.MustNew(store, limit.Policy{Name: "login", Limit: 1, Window: time.Minute}, limit.WithObserver(rec))
	e := echo.New()
	e.Use(echolimit.Middleware(global, echolimit.WithHTTPError()))
	e.POST("/login", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, echolimit.Middleware(login, echolimit.WithHTTPError()))
	for i, want := range []int{204, 429, 429} {
		if w := serveRecorded(e, "POST", "/login"); w.Code != want {
			t.Fatalf("login %d: %d, want %d", i+1, w.Code, want)
		}
	}
	if n := rec.Refunds(limit.RefundLaterMount); n != 2 {
		t.Fatalf("%d later-mount refunds of the global charge, want 2", n)
	}
}
