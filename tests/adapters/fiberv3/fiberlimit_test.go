package fiberlimit_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiberv3"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/fibertest"
	"github.com/quotagate/quotagate/tests/redistest"
	"github.com/valyala/fasthttp"
)

// newStore is a memory store at a fake clock, as the benchmarks measure.
func newStore(tb testing.TB) limitstore.Store {
	return redistest.Memory(tb, limittest.NewClock(time.Unix(0, 0)).Now)
}

// serveOnce returns a function that serves GET /v1/notes/7 from
// 192.0.2.1:4711 to app, reusing one fasthttp context (no socket).
func serveOnce(app *fiber.App) func() {
	handler := app.Handler()
	var req fasthttp.Request
	req.SetRequestURI("/v1/notes/7")
	req.Header.SetMethod("GET")
	var fc fasthttp.RequestCtx
	fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
	return func() {
		fc.Response.Reset()
		handler(&fc)
	}
}

// BenchmarkHandler measures one allowed request through fiber's handler
// with the limiter on app.Use (Shared) or at route level (PerRoute), or a
// PerRoute limiter on app.Use, which finds the route (the third of three);
// "fiber-only" is fiber alone. No socket: the fasthttp context is reused.
func BenchmarkHandler(b *testing.B) {
	for _, name := range []string{"fiber-only", "shared", "per-route", "per-route-in-use"} {
		b.Run(name, func(b *testing.B) {
			app := fiber.New()
			h := func(fiber.Ctx) error { return nil }
			switch name {
			case "fiber-only":
				app.Get("/v1/notes/:id", h)
			case "shared":
				app.Use(fiberlimit.New(limittest.MustNew(newStore(b), limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute}, limit.WithKeyPrefix("bench"))))
				app.Get("/v1/notes/:id", h)
			case "per-route":
				l := limittest.MustNew(newStore(b), limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute, Scope: limit.PerRoute}, limit.WithKeyPrefix("bench"))
				app.Get("/v1/notes/:id", fiberlimit.New(l), h)
			case "per-route-in-use":
				app.Use(fiberlimit.New(limittest.MustNew(newStore(b), limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute, Scope: limit.PerRoute}, limit.WithKeyPrefix("bench"))))
				app.Get("/v1/login", h)
				app.Get("/v1/search", h)
				app.Get("/v1/notes/:id", h)
			}
			serve := serveOnce(app)
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}

// On the allowed path at the default disclosure the handler allocates the
// two copies it must make, as on fiber v2 (the request path and the peer
// address text) and the decision's context, which ends when the client
// leaves: at route level, and for a Shared policy in app.Use, which looks
// no route up. A PerRoute policy in app.Use adds fiber.RoutePatternMatch's
// parse of the matching route's pattern (3 allocations on fiber v3.1).
func TestHandlerAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	for _, tt := range []struct {
		mount    string
		perRoute bool
		max      float64
	}{{"route", true, 3}, {"app-use", false, 3}, {"app-use", true, 6}} {
		p := limit.Policy{Limit: 1 << 20, Window: time.Hour}
		if tt.perRoute {
			p.Scope = limit.PerRoute
		}
		l := limittest.MustNew(newStore(t), p, limit.WithKeyPrefix("allocs"))
		app := fiber.New()
		h := func(fiber.Ctx) error { return nil }
		if tt.mount == "app-use" {
			app.Use(fiberlimit.New(l))
			app.Get("/v1/notes/:id", h)
		} else {
			app.Get("/v1/notes/:id", fiberlimit.New(l), h)
		}
		serve := serveOnce(app)
		serve()
		if got := testing.AllocsPerRun(500, serve); got > tt.max {
			t.Fatalf("%s, PerRoute %v: %.1f allocations per allowed request, want at most %.0f", tt.mount, tt.perRoute, got, tt.max)
		}
	}
}

// serve runs app on a real loopback socket until the test ends and returns
// its base URL.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, app)
	return "http://" + ln.Addr().String()
}

// serveOn serves app on ln until t ends (fibertest.ServeFunc).
func serveOn(t testing.TB, ln net.Listener, app *fiber.App) {
	fibertest.ServeFunc(t, ln, func(ln net.Listener) error {
		return app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	}, app.ShutdownWithTimeout)
}

// routes builds the same API with the limiter at route level in each way
// fiber offers.
func routes(mount string, mw, h fiber.Handler) *fiber.App {
	app := fiber.New()
	switch mount {
	case "app-route":
		app.Get("/v1/notes/:id", mw, h)
	case "group-route":
		app.Group("/v1").Get("/notes/:id", mw, h)
	case "mounted-app-route":
		sub := fiber.New()
		sub.Get("/notes/:id", mw, h)
		app.Use("/v1", sub)
	}
	return app
}

// At route level, in each way fiber offers, the route template is the
// matched route's, spelt fiber's way in the handler label.
func TestPerRouteBucketAtRouteLevel(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"app-route", "group-route", "mounted-app-route"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			return serve(t, routes(mount, fiberlimit.New(l), func(c fiber.Ctx) error { return c.SendString("note") }))
		})
}

// Through Routes a group's routes each get the limiter at route level, so
// the route template is known in a group, a nested group, a Route block and
// a RouteChain alike.
func TestPerRouteBucketThroughRoutes(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"routes-group", "routes-nested", "routes-route", "routes-chain"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			app := fiber.New()
			h := func(c fiber.Ctx) error { return c.SendString("note") }
			switch mount {
			case "routes-group":
				fiberlimit.Routes(app.Group("/v1"), l).Get("/notes/:id", h)
			case "routes-nested":
				fiberlimit.Routes(app, l).Group("/v1").Get("/notes/:id", h)
			case "routes-route":
				fiberlimit.Routes(app, l).Route("/v1", func(r fiber.Router) { r.Get("/notes/:id", h) })
			case "routes-chain":
				fiberlimit.Routes(app.Group("/v1"), l).RouteChain("/notes/:id").Get(h)
			}
			return serve(t, app)
		})
}

// A PerRoute policy on a group through Routes: each route of the group has
// a bucket of its own (3 requests on /v1/a leave /v1/b's allowance whole),
// with its handler label and no route-unknown issue; a Use middleware added
// through Routes is the group's own and is not limited twice.
func TestRoutesGivesAGroupPerRouteBuckets(t *testing.T) {
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 3, Scope: limit.PerRoute}, limit.WithObserver(obs))
	app := fiber.New()
	h := func(c fiber.Ctx) error { return c.SendString("ok") }
	v1 := fiberlimit.Routes(app.Group("/v1"), l)
	v1.Use(func(c fiber.Ctx) error { c.Set("X-Group", "v1"); return c.Next() })
	v1.Get("/a", h).Post("/b", h)
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.9")
	for i := range 3 {
		if r := limittest.Do(t, c, "GET", url+"/v1/a"); r.Status != http.StatusOK || r.Header.Get("X-Group") != "v1" {
			t.Fatalf("GET /v1/a %d: %d %v, want 200 through the group middleware", i+1, r.Status, r.Header)
		}
	}
	if r := limittest.Do(t, c, "GET", url+"/v1/a"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("4th GET /v1/a: %d, want 429", r.Status)
	}
	if r := limittest.Do(t, c, "POST", url+"/v1/b"); r.Status != http.StatusOK {
		t.Fatalf("POST /v1/b after /v1/a's allowance is spent: %d, want 200 (a bucket of its own)", r.Status)
	}
	if e := obs.Last(); e.Bucket != "/v1/b 3p60" || e.Handler != "/v1/b" {
		t.Fatalf("event %+v, want bucket \"/v1/b 3p60\", handler /v1/b", e)
	}
	if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
		t.Fatalf("%d route-unknown issues, want 0", n)
	}
}

// In a Use mount fiber has not matched the route yet; a PerRoute limiter
// there finds the route fiber will serve, so that each route has the bucket
// a route-level mount gives it, whichever way the mount is made, over real
// sockets, HEAD (fiber v3's automatic HEAD route) included.
func TestPerRouteBucketInUseMounts(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"app-use", "group-use", "group-arg", "app-use-mounted-app"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			app := fiber.New()
			mw := fiberlimit.New(l)
			h := func(c fiber.Ctx) error { return c.SendString("note") }
			switch mount {
			case "app-use":
				app.Use(mw)
				app.Get("/v1/notes/:id", h)
			case "group-use":
				g := app.Group("/v1")
				g.Use(mw)
				g.Get("/notes/:id", h)
			case "group-arg":
				app.Group("/v1", mw).Get("/notes/:id", h)
			case "app-use-mounted-app":
				app.Use(mw)
				sub := fiber.New()
				sub.Get("/notes/:id", h)
				app.Use("/v1", sub)
			}
			return serve(t, app)
		})
}

// A PerRoute limiter in a group mount gives each route of the group its
// own bucket (3 requests on /v1/a leave /v1/b's allowance whole), with no
// route-unknown issue, and a request under the group that no route serves
// counts in the Shared bucket, also without the issue.
func TestPerRouteInUseMountGivesEachRouteItsBucket(t *testing.T) {
	for _, mount := range []string{"app-use", "group-use", "group-arg"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			obs := &limittest.Recorder{}
			l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 3, Scope: limit.PerRoute}, limit.WithObserver(obs))
			mw := fiberlimit.New(l)
			app := fiber.New()
			h := func(c fiber.Ctx) error { return c.SendString("ok") }
			switch mount {
			case "app-use":
				app.Use(mw)
				app.Get("/v1/a", h)
				app.Get("/v1/b", h)
			case "group-use":
				g := app.Group("/v1")
				g.Use(mw)
				g.Get("/a", h)
				g.Get("/b", h)
			case "group-arg":
				g := app.Group("/v1", mw)
				g.Get("/a", h)
				g.Get("/b", h)
			}
			url := serve(t, app)
			c := limittest.ClientFrom("127.0.0.7")
			for i := range 3 {
				if r := limittest.Do(t, c, "GET", url+"/v1/a"); r.Status != http.StatusOK {
					t.Fatalf("GET /v1/a %d: %d, want 200", i+1, r.Status)
				}
			}
			if r := limittest.Do(t, c, "GET", url+"/v1/a"); r.Status != http.StatusTooManyRequests {
				t.Fatalf("4th GET /v1/a: %d, want 429", r.Status)
			}
			if r := limittest.Do(t, c, "GET", url+"/v1/b"); r.Status != http.StatusOK {
				t.Fatalf("GET /v1/b after /v1/a's allowance is spent: %d, want 200 (a bucket of its own)", r.Status)
			}
			if e := obs.Last(); e.Bucket != "/v1/b 3p60" || e.Handler != "/v1/b" {
				t.Fatalf("event %+v, want bucket \"/v1/b 3p60\", handler /v1/b", e)
			}
			if r := limittest.Do(t, c, "GET", url+"/v1/nope"); r.Status != http.StatusNotFound {
				t.Fatalf("GET /v1/nope: %d, want fiber's 404", r.Status)
			}
			if e := obs.Last(); e.Bucket != "3p60" || e.Handler != "" {
				t.Fatalf("unmatched request: event %+v, want the Shared bucket, no handler label", e)
			}
			if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
				t.Fatalf("%d route-unknown issues, want 0", n)
			}
		})
	}
}

// The documented limit of c.Matched(): a Use mount that a route handler
// reaches by calling c.Next() sees the Use mount's own path ("/") as the
// route template; a Use mount in front of the routes finds the route.
func TestUseMountReachedFromARoute(t *testing.T) {
	for _, after := range []bool{false, true} {
		obs := &limittest.Recorder{}
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 10, Scope: limit.PerRoute}, limit.WithObserver(obs))
		app := fiber.New()
		if !after {
			app.Use(fiberlimit.New(l))
		}
		app.Get("/x", func(c fiber.Ctx) error { return c.Next() })
		if after {
			app.Use(fiberlimit.New(l))
		}
		app.Use(func(c fiber.Ctx) error { return c.SendString("ok") })
		if r := limittest.Do(t, limittest.ClientFrom("127.0.0.13"), "GET", serve(t, app)+"/x"); r.Status != http.StatusOK {
			t.Fatalf("after %v: status %d", after, r.Status)
		}
		want := "/x"
		if after {
			want = "/"
		}
		if got := obs.Last().Handler; got != want {
			t.Fatalf("after %v: the Use mount saw route %q, want %q", after, got, want)
		}
	}
}

// An allowed handler's error still reaches fiber's error handler.
func TestHandlerErrorReachesTheErrorHandler(t *testing.T) {
	app := fiber.New()
	app.Use(fiberlimit.New(limittest.MustNew(limittest.NewStore(nil), limit.Policy{})))
	app.Get("/err", func(c fiber.Ctx) error { return fiber.NewError(http.StatusTeapot, "short and stout") })
	if r := limittest.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", serve(t, app)+"/err"); r.Status != http.StatusTeapot || r.Body != "short and stout" {
		t.Fatalf("handler error: %d %q, want fiber's 418 from the error handler", r.Status, r.Body)
	}
}

// The status a CountStatus policy sees for a handler's error is the one
// fiber's DefaultErrorHandler answers with: the Code of a *fiber.Error in
// the error's chain (wrapped included), else 500.
func TestCountStatusSeesTheStatusFiberAnswers(t *testing.T) {
	tests := []struct {
		name string
		h    fiber.Handler
		want []int
	}{
		{"wrapped_fiber_error", func(c fiber.Ctx) error { return fmt.Errorf("signin: %w", fiber.ErrUnauthorized) }, []int{401, 401, 401, 401}},
		{"fiber_server_error", func(c fiber.Ctx) error { return fiber.ErrServiceUnavailable }, []int{503, 503, 429, 429}},
		{"plain_error", func(c fiber.Ctx) error { return errors.New("boom") }, []int{500, 500, 429, 429}},
		{"status_written", func(c fiber.Ctx) error { return c.SendStatus(http.StatusBadGateway) }, []int{502, 502, 429, 429}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Hour,
				CountStatus: func(s int) bool { return s >= 500 }})
			app := fiber.New()
			app.Use(fiberlimit.New(l))
			app.Get("/x", tc.h)
			url := serve(t, app)
			c := limittest.ClientFrom("127.0.0.9")
			var got []int
			for range 4 {
				got = append(got, limittest.Do(t, c, "GET", url+"/x").Status)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%v, want %v (only the server errors the client saw count)", got, tc.want)
			}
		})
	}
}

// fasthttp reuses the memory behind c.Path() and header values for later
// requests. A CostFunc (or KeyFunc, or Observer) may keep the strings of
// the Request it is given; they must still read what they read when the
// request was decided. Without the adapter's copies this fails: the kept
// strings change under the test as later requests on the same keep-alive
// connection reuse the buffers.
func TestRequestStringsOutliveTheRequest(t *testing.T) {
	var mu sync.Mutex
	var kept []string
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1000,
		CostFunc: func(r limit.Request) int64 {
			mu.Lock()
			kept = append(kept, r.Method, r.Path)
			kept = append(kept, r.Header.Values("X-Trace")...)
			mu.Unlock()
			return 1
		}})
	// PURGE is not a standard method: the method string is the app's
	// configured one, not a request buffer.
	app := fiber.New(fiber.Config{RequestMethods: append(slices.Clip(fiber.DefaultMethods), "PURGE")})
	app.Use(fiberlimit.New(l))
	app.All("/*", func(c fiber.Ctx) error { return c.SendString("ok") })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.9") // one keep-alive connection
	var want []string
	methods := []string{"PURGE", "GET", "PUT", "PURGE"}
	for i := range 12 {
		m := methods[i%len(methods)]
		path := "/p/" + strings.Repeat(string(rune('a'+i)), 8)
		trace := strings.Repeat(string(rune('A'+i)), 16)
		req, _ := http.NewRequest(m, url+path, nil)
		req.Header.Set("X-Trace", trace)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d, want 200", m, path, resp.StatusCode)
		}
		want = append(want, m, path, trace)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(kept, want) {
		t.Fatalf("kept strings changed after their requests:\n got %q\nwant %q", kept, want)
	}
}

// The header view gives every line of a repeated header, in order, whatever
// the case of the name asked for.
func TestHeaderValuesEveryLine(t *testing.T) {
	var got []string
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 10,
		KeyFunc: func(r limit.Request) (string, error) {
			got = r.Header.Values("x-forwarded-for")
			return "", nil
		}})
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/x", func(c fiber.Ctx) error { return nil })
	url := serve(t, app)
	req, _ := http.NewRequest("GET", url+"/x", nil)
	req.Header.Add("X-Forwarded-For", "192.0.2.1, 192.0.2.2")
	req.Header.Add("X-Forwarded-For", "192.0.2.3")
	resp, err := limittest.ClientFrom("127.0.0.10").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := []string{"192.0.2.1, 192.0.2.2", "192.0.2.3"}; !slices.Equal(got, want) {
		t.Fatalf("Values = %q, want %q", got, want)
	}
}

// With a trusted X-Forwarded-For (one proxy hop), the engine reads the
// header through the adapter's fasthttp view: several lines are one list, so
// the client is the rightmost member of the last line.
func TestTrustedHeaderAcrossLines(t *testing.T) {
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1}, limit.WithTrustedHeader("X-Forwarded-For", 1), limit.WithObserver(obs))
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/x", func(c fiber.Ctx) error { return nil })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.12") // the proxy: one peer for every client
	send := func(lines ...string) int {
		req, _ := http.NewRequest("GET", url+"/x", nil)
		for _, v := range lines {
			req.Header.Add("X-Forwarded-For", v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("203.0.113.1, 198.51.100.7", "192.0.2.50"); got != 200 {
		t.Fatalf("client 192.0.2.50: %d, want 200", got)
	}
	if e := obs.Last(); e.KeySource != limit.KeySourceHeader {
		t.Fatalf("key source %s, want header", e.KeySource)
	}
	if got := send("198.51.100.7", "192.0.2.51"); got != 200 {
		t.Fatalf("client 192.0.2.51 behind the same proxy: %d, want 200 (own budget)", got)
	}
	if got := send("203.0.113.9", "192.0.2.50"); got != http.StatusTooManyRequests {
		t.Fatalf("client 192.0.2.50 again (other left members): %d, want 429", got)
	}
}

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

func TestClientGoneReleasesTheDecision(t *testing.T) { conformance.CheckClientGone(t, harness{}) }

// harness builds a fiber v3 app for a conformance App: global limiters with
// app.Use; a group's limiters on each route of an app.Group, before the
// route's own (in a Use mount fiber has not matched the route yet, so
// PerRoute group limits go at route level, as the package documents).
type harness struct{}

func (harness) Name() string { return "fiberv3" }

func (harness) KeyFunc(name string) func(limit.Request) (string, error) {
	return fiberlimit.KeyFunc(func(c fiber.Ctx) (string, error) { return c.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return fiberlimit.CostFunc(func(c fiber.Ctx) int64 { return int64(fiber.Query[int](c, name)) })
}

func (harness) PlanFunc(name string) func(limit.Request) (string, error) {
	return fiberlimit.PlanFunc(func(c fiber.Ctx) (string, error) { return c.Get(name), nil })
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	a := fiber.New()
	for _, l := range app.Global {
		a.Use(fiberlimit.New(l))
	}
	chain := func(lss ...[]*limit.Limiter) []any {
		var hs []any
		for _, ls := range lss {
			for _, l := range ls {
				hs = append(hs, fiberlimit.New(l))
			}
		}
		return hs
	}
	handler := func(rt *conformance.Route) fiber.Handler {
		return func(c fiber.Ctx) error {
			name, value, status, body := rt.Serve()
			c.Set(name, value)
			return c.Status(status).SendString(body)
		}
	}
	add := func(r fiber.Router, rt *conformance.Route, path string, lss ...[]*limit.Limiter) {
		hs := append(chain(lss...), handler(rt))
		r.Add([]string{rt.Method}, conformance.ColonPath(path), hs[0], hs[1:]...)
	}
	for _, g := range app.Groups {
		grp := a.Group(g.Prefix)
		for _, rt := range g.Routes {
			add(grp, rt, rt.Relative(g.Prefix), g.Limiters, rt.Limiters)
		}
	}
	for _, rt := range app.Routes {
		add(a, rt, rt.Path, rt.Limiters)
	}
	serveOn(t, ln, a)
}

// At route level, where the package documentation puts PerRoute limits,
// the route is the one fiber serves, whatever spelling it accepted for it:
// a trailing slash (StrictRouting off, the default) and another letter case
// (CaseSensitive off, the default).
// A Use mount finds the same route for each spelling.
func TestPerRouteBucketWhateverTheSpelling(t *testing.T) {
	for _, mount := range []string{"route", "app-use"} {
		t.Run(mount, func(t *testing.T) {
			conformance.CheckSpellings(t, []string{"/v1/login/", "/V1/LOGIN", "/v1/Login/"},
				func(t *testing.T, l *limit.Limiter) string {
					app := fiber.New()
					h := func(c fiber.Ctx) error { return nil }
					if mount == "route" {
						app.Post("/v1/login", fiberlimit.New(l), h)
					} else {
						app.Use(fiberlimit.New(l))
						app.Post("/v1/login", h)
					}
					return serve(t, app)
				})
		})
	}
}

// Requests no route matches reach a fiberlimit.Unmatched mount registered
// after every route: they count in the Shared bucket, as unmatched (no
// handler label, no route-unknown issue), and fiber still answers 404 or
// 405 while they are allowed; served routes never count there, HEAD on a
// GET route included (fiber v3 runs its automatic HEAD route after the
// Unmatched mount).
func TestUnmatchedMountCountsRequestsNoRouteServes(t *testing.T) {
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Algorithm: limit.FixedWindow, Limit: 3, Scope: limit.PerRoute}, limit.WithObserver(obs))
	app := fiber.New()
	app.Get("/v1/notes/:id", fiberlimit.New(l), func(c fiber.Ctx) error { return c.SendString("note") })
	app.Use(fiberlimit.Unmatched(l))
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.14")
	for _, q := range []struct {
		method, path string
		status       int
	}{{"GET", "/v1/nope", http.StatusNotFound}, {"DELETE", "/v1/notes/1", http.StatusMethodNotAllowed}} {
		if r := limittest.Do(t, c, q.method, url+q.path); r.Status != q.status {
			t.Fatalf("%s %s: %d, want fiber's %d", q.method, q.path, r.Status, q.status)
		}
		if e := obs.Last(); e.Bucket != "3p60f" || e.Handler != "" {
			t.Fatalf("%s %s: event %+v, want the Shared bucket, no handler label", q.method, q.path, e)
		}
	}
	for _, method := range []string{"GET", "HEAD"} {
		if r := limittest.Do(t, c, method, url+"/v1/notes/1"); r.Status != http.StatusOK {
			t.Fatalf("%s /v1/notes/1: %d", method, r.Status)
		}
		if e := obs.Last(); e.Bucket != "/v1/notes/{id} 3p60f" {
			t.Fatalf("served route (%s): event %+v, want its own bucket", method, e)
		}
	}
	if n := len(obs.Decisions()); n != 4 {
		t.Fatalf("%d decisions for 4 requests: a served route counted in the Unmatched mount too", n)
	}
	if r := limittest.Do(t, c, "GET", url+"/v1/nope"); r.Status != http.StatusNotFound {
		t.Fatalf("third unmatched request: %d, want 404 (the Shared bucket of 3 holds 2)", r.Status)
	}
	if r := limittest.Do(t, c, "DELETE", url+"/v1/notes/1"); r.Status != http.StatusTooManyRequests || r.Header.Get("Allow") != "" {
		t.Fatalf("fourth unmatched request: %d (Allow %q), want 429 without fiber's Allow (Shared bucket of 3 spent)", r.Status, r.Header.Get("Allow"))
	}
	if n := obs.Issues(limit.Issue("route-unknown")); n != 0 {
		t.Fatalf("%d route-unknown issues, want 0", n)
	}
}
