package ginlimit_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no debug route listing on stdout
	os.Exit(m.Run())
}

func serve(t *testing.T, r *gin.Engine) string {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// routes builds the same API under each kind of gin mount; mount says where
// the limiter goes.
func routes(mount string, mw, h gin.HandlerFunc) *gin.Engine {
	r := gin.New()
	both := []string{http.MethodGet, http.MethodHead}
	switch mount {
	case "engine-use":
		r.Use(mw)
		r.Match(both, "/v1/notes/:id", h)
	case "group-arg":
		r.Group("/v1", mw).Match(both, "/notes/:id", h)
	case "group-use":
		g := r.Group("/v1")
		g.Use(mw)
		g.Match(both, "/notes/:id", h)
	case "route":
		r.Match(both, "/v1/notes/:id", mw, h)
	}
	return r
}

// gin sets c.FullPath() before the whole chain runs: every mount sees the
// route, spelt gin's way in the handler label.
func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"engine-use", "group-arg", "group-use", "route"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			return serve(t, routes(mount, ginlimit.Middleware(l), func(c *gin.Context) { c.String(http.StatusOK, "note") }))
		})
}

// gin runs engine-level middleware on 404s (and on 405s with
// HandleMethodNotAllowed) with no route: the middleware passes them as
// unmatched, so a PerRoute policy counts them in its Shared bucket with no
// handler label and no route-unknown issue.
func TestUnmatchedRequestsCountInTheSharedBucket(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		status       int
	}{{"GET", "/nothing", http.StatusNotFound}, {"DELETE", "/x", http.StatusMethodNotAllowed}, {"FOO", "/x", http.StatusMethodNotAllowed}} {
		obs := &limittest.Recorder{}
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.Use(ginlimit.Middleware(l))
		r.GET("/x", func(*gin.Context) {})
		rep := limittest.Do(t, limittest.ClientFrom("127.0.0.7"), tc.method, serve(t, r)+tc.path)
		if rep.Status != tc.status {
			t.Fatalf("%s %s: status %d, want gin's %d", tc.method, tc.path, rep.Status, tc.status)
		}
		if got := obs.Last(); got.Bucket != "2p60" || got.Handler != "" {
			t.Fatalf("%s %s: event %+v, want the Shared bucket and no handler label", tc.method, tc.path, got)
		}
		if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
			t.Fatalf("%s %s: %d route-unknown issues, want 0", tc.method, tc.path, n)
		}
	}
}

// gin routes before any handler runs, so c.FullPath() in an engine-level
// mount is the route gin serves, whatever spelling it accepted for it:
// doubled slashes with RemoveExtraSlash, and an escaped slash (gin routes on
// the decoded path unless UseRawPath is set).
func TestPerRouteBucketWhateverTheSpelling(t *testing.T) {
	conformance.CheckSpellings(t, []string{"/v1//login", "//v1/login", "/v1%2Flogin"},
		func(t *testing.T, l *limit.Limiter) string {
			r := gin.New()
			r.RemoveExtraSlash = true
			r.Use(ginlimit.Middleware(l))
			r.POST("/v1/login", func(*gin.Context) {})
			return serve(t, r)
		})
}

// engineWith is a gin engine serving GET /v1/notes/:id, with l on r.Use
// unless l is nil.
func engineWith(l *limit.Limiter) http.Handler {
	r := gin.New()
	if l != nil {
		r.Use(ginlimit.Middleware(l))
	}
	r.GET("/v1/notes/:id", func(*gin.Context) {})
	return r
}

// BenchmarkMiddleware measures one allowed request through gin with the
// middleware on the engine, Shared and PerRoute; "gin-only" is gin alone.
func BenchmarkMiddleware(b *testing.B) {
	conformance.BenchmarkMiddleware(b, "gin-only", redistest.Memory, engineWith)
}

// gin and the middleware together allocate nothing on the allowed path at
// the default disclosure.
func TestMiddlewareAllocations(t *testing.T) {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	if got := conformance.AllocsPerRequest(t, engineWith(l)); got > 0 {
		t.Fatalf("%.1f allocations per allowed request, want 0", got)
	}
}

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

// A client that leaves while its request's decision waits on a slow store
// releases the decision at once, and the handler does not run.
func TestClientGoneReleasesTheDecision(t *testing.T) { conformance.CheckClientGone(t, harness{}) }

// harness builds a gin engine for a conformance App: global limiters with
// r.Use, groups with r.Group(prefix, middleware...), route limiters before
// the route's handler.
type harness struct{}

func (harness) Name() string { return "gin" }

func (harness) KeyFunc(name string) func(limit.Request) (string, error) {
	return ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.GetHeader(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return ginlimit.CostFunc(func(c *gin.Context) int64 { n, _ := strconv.ParseInt(c.Query(name), 10, 64); return n })
}

func (harness) PlanFunc(name string) func(limit.Request) (string, error) {
	return ginlimit.PlanFunc(func(c *gin.Context) (string, error) { return c.GetHeader(name), nil })
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	r := gin.New()
	// 405 for a path served for other methods, as the other routers answer
	// (gin's default is 404).
	r.HandleMethodNotAllowed = true
	for _, l := range app.Global {
		r.Use(ginlimit.Middleware(l))
	}
	chain := func(ls []*limit.Limiter, h gin.HandlerFunc) []gin.HandlerFunc {
		var hs []gin.HandlerFunc
		for _, l := range ls {
			hs = append(hs, ginlimit.Middleware(l))
		}
		return append(hs, h)
	}
	handler := func(rt *conformance.Route) gin.HandlerFunc {
		return func(c *gin.Context) {
			name, value, status, body := rt.Serve()
			c.Header(name, value)
			c.String(status, body)
		}
	}
	for _, g := range app.Groups {
		var mws []gin.HandlerFunc
		for _, l := range g.Limiters {
			mws = append(mws, ginlimit.Middleware(l))
		}
		grp := r.Group(g.Prefix, mws...)
		for _, rt := range g.Routes {
			grp.Handle(rt.Method, conformance.ColonPath(rt.Relative(g.Prefix)), chain(rt.Limiters, handler(rt))...)
		}
	}
	for _, rt := range app.Routes {
		r.Handle(rt.Method, conformance.ColonPath(rt.Path), chain(rt.Limiters, handler(rt))...)
	}
	conformance.ServeHandler(t, ln, r)
}
