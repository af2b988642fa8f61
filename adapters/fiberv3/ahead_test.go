package fiberlimit_test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiberv3"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/valyala/fasthttp"
)

// apiRoutes are the routes of the API the Use mount tests serve, relative
// to the group prefix /v1, in registration order.
var apiRoutes = []struct{ method, path string }{
	{"GET", "/notes/:id"},
	{"GET", "/files/*"},
	{"GET", "/users/:name?"},
	{"GET", "/items/:id<int>"},
	{"GET", "/items/:slug"},
	{"GET", "/items/special"}, // never served: /items/:slug comes first
	{"POST", "/login"},
	{"GET", "/Docs/Guide"},
	{"GET", "/tags/:tag/"},
	{"PUT", "/notes/:id.:format"},
}

// useMounts are the ways of mounting a handler in front of the routes
// that run before fiber has matched one: on the app, on a group, as a
// group's handler, on the app in front of a mounted app, and on the
// mounted app.
var useMounts = []string{"app-use", "group-use", "group-arg", "mounted-app", "mounted-app-use"}

// apiApp returns an app serving apiRoutes under /v1 with mw mounted the way
// mount says, or, with routeLevel, the same app with mw in front of each
// route instead (the route-level twin of that mount).
func apiApp(cfg fiber.Config, mount string, mw fiber.Handler, routeLevel bool) *fiber.App {
	app := fiber.New(cfg)
	ok := func(c fiber.Ctx) error { return c.SendString("ok") }
	handlers := []any{ok}
	if routeLevel {
		handlers = []any{mw, ok}
	}
	var r fiber.Router
	prefix := ""
	switch mount {
	case "app-use":
		if !routeLevel {
			app.Use(mw)
		}
		r, prefix = app, "/v1"
	case "group-use":
		r = app.Group("/v1")
		if !routeLevel {
			r.Use(mw)
		}
	case "group-arg":
		if routeLevel {
			r = app.Group("/v1")
		} else {
			r = app.Group("/v1", mw)
		}
	case "mounted-app":
		if !routeLevel {
			app.Use(mw)
		}
		sub := fiber.New(cfg)
		r = sub
		defer app.Use("/v1", sub)
	case "mounted-app-use":
		sub := fiber.New(cfg)
		if !routeLevel {
			sub.Use(mw)
		}
		r = sub
		defer app.Use("/v1", sub)
	}
	for _, rt := range apiRoutes {
		r.Add([]string{rt.method}, prefix+rt.path, handlers[0], handlers[1:]...) // GET: and an automatic HEAD
	}
	return app
}

// serveFast serves one request to h from 192.0.2.1 without a socket and
// returns its status.
func serveFast(h fasthttp.RequestHandler, method, path string) int {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	var fc fasthttp.RequestCtx
	fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
	h(&fc)
	return fc.Response.StatusCode()
}

// decided serves one request and returns the decision it made, if any.
func decided(h fasthttp.RequestHandler, rec *limittest.Recorder, method, path string) (status int, e limit.DecisionEvent, ok bool) {
	n := len(rec.Decisions())
	status = serveFast(h, method, path)
	if ds := rec.Decisions(); len(ds) > n {
		return status, ds[len(ds)-1], true
	}
	return status, e, false
}

// A PerRoute policy in a Use mount (app.Use, Group.Use, app.Group(prefix,
// handler), app.Use in front of a mounted app) counts every request in the
// bucket a route-level mount of the same route gives it, with the same
// handler label and no route-unknown issue: parameters, a wildcard, an
// optional parameter, a constraint and the route registered first among
// those that match, another letter case and a trailing slash where fiber's
// Config accepts them, HEAD on a GET route. A request no route matches
// (404, 405) counts in the Shared bucket, also without the route-unknown
// issue; the route-level twin does not see it at all.
func TestUseMountGivesTheRouteLevelBucket(t *testing.T) {
	requests := []struct{ method, path string }{
		{"GET", "/v1/notes/7"}, {"HEAD", "/v1/notes/7"}, {"GET", "/V1/Notes/7"}, {"GET", "/v1/notes/7/"},
		{"GET", "/v1/files/a/b.txt"}, {"GET", "/v1/files"}, {"GET", "/v1/files/"},
		{"GET", "/v1/users"}, {"GET", "/v1/users/ann"}, {"HEAD", "/v1/users/"},
		{"GET", "/v1/items/12"}, {"GET", "/v1/items/abc"}, {"GET", "/v1/items/special"},
		{"POST", "/v1/login"}, {"POST", "/v1/login/"}, {"POST", "/V1/LOGIN"},
		{"GET", "/v1/Docs/Guide"}, {"GET", "/v1/docs/guide"}, {"GET", "/v1/docs/guide/"},
		{"GET", "/v1/tags/go"}, {"GET", "/v1/tags/go/"}, {"PUT", "/v1/notes/7.json"},
		{"GET", "/v1/n%6Ftes/7"}, {"GET", "/v1/login"}, {"DELETE", "/v1/notes/7"}, {"GET", "/v1/nope"}, {"GET", "/v1"}, {"GET", "/nope"},
	}
	configs := map[string]fiber.Config{
		"default":        {},
		"case-sensitive": {CaseSensitive: true},
		"strict-routing": {StrictRouting: true},
		"unescape-path":  {UnescapePath: true},
	}
	for name, cfg := range configs {
		for _, mount := range useMounts {
			t.Run(name+"/"+mount, func(t *testing.T) {
				t.Parallel()
				newLimiter := func(rec *limittest.Recorder) *limit.Limiter {
					return limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1000, Scope: limit.PerRoute}, limit.WithObserver(rec))
				}
				var atRoute, inUse limittest.Recorder
				twin := apiApp(cfg, mount, fiberlimit.New(newLimiter(&atRoute)), true).Handler()
				app := apiApp(cfg, mount, fiberlimit.New(newLimiter(&inUse)), false).Handler()
				served := 0
				for _, q := range requests {
					wantStatus, want, routed := decided(twin, &atRoute, q.method, q.path)
					status, got, seen := decided(app, &inUse, q.method, q.path)
					if status != wantStatus {
						t.Fatalf("%s %s: status %d, the route-level twin's %d", q.method, q.path, status, wantStatus)
					}
					switch {
					case routed:
						served++
						if !seen || got.Bucket != want.Bucket || got.Handler != want.Handler {
							t.Fatalf("%s %s: bucket %q handler %q (decided %v), want the route level's %q %q",
								q.method, q.path, got.Bucket, got.Handler, seen, want.Bucket, want.Handler)
						}
					case seen && (got.Bucket != "1000p60" || got.Handler != ""):
						t.Fatalf("%s %s (%d, no route): bucket %q handler %q, want the Shared bucket, no handler label",
							q.method, q.path, status, got.Bucket, got.Handler)
					}
				}
				if served < 10 {
					t.Fatalf("the route-level twin served %d requests: the table tests too little", served)
				}
				if n := inUse.Issues(limit.Issue("route-unknown")); n != 0 {
					t.Fatalf("%d route-unknown issues, want 0", n)
				}
			})
		}
	}
}

// GET and HEAD on one route share its bucket in a Use mount, as at route
// level: 2 per minute across them, a third request limited; another route
// keeps its own allowance.
func TestUseMountHeadSharesGetBucket(t *testing.T) {
	rec := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(limittest.NewClock(time.Unix(0, 0)).Now),
		limit.Policy{Limit: 2, Scope: limit.PerRoute, Algorithm: limit.FixedWindow}, limit.WithObserver(rec))
	h := apiApp(fiber.Config{}, "app-use", fiberlimit.New(l), false).Handler()
	for _, q := range []struct {
		method, path string
		status       int
	}{{"GET", "/v1/notes/1", 200}, {"HEAD", "/v1/notes/2", 200}, {"GET", "/v1/notes/3", 429}, {"GET", "/v1/users/ann", 200}} {
		if got := serveFast(h, q.method, q.path); got != q.status {
			t.Fatalf("%s %s: %d, want %d", q.method, q.path, got, q.status)
		}
	}
	if e := rec.Last(); e.Bucket != "/v1/users/{name} 2p60f" {
		t.Fatalf("last bucket %q, want the users route's", e.Bucket)
	}
}

// A Use mount finds the first route fiber would serve after it, and follows
// the app's routes as they change: a route removed (App.RemoveRoute) and one
// added once fiber routes to them (RebuildTree, or Handler() again).
func TestUseMountFollowsTheRoutes(t *testing.T) {
	rec := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 100, Scope: limit.PerRoute}, limit.WithObserver(rec))
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/x/:id", func(c fiber.Ctx) error { return c.SendString("id") })
	app.Get("/x/*", func(c fiber.Ctx) error { return c.SendString("any") })
	for _, step := range []struct {
		change        func()
		path, handler string
	}{
		{func() {}, "/x/1", "/x/:id"},
		{func() { app.RemoveRoute("/x/:id"); app.RebuildTree() }, "/x/1", "/x/*"},
		{func() { app.Get("/y/:id", func(c fiber.Ctx) error { return nil }) }, "/y/1", "/y/:id"},
	} {
		step.change()
		if got := serveFast(app.Handler(), "GET", step.path); got != 200 { // Handler() rebuilds fiber's tree
			t.Fatalf("GET %s: %d", step.path, got)
		}
		if e := rec.Last(); e.Handler != step.handler {
			t.Fatalf("GET %s: handler %q, want %q", step.path, e.Handler, step.handler)
		}
	}
}

// Only a Limiter whose bucket is the route looks the route up in a Use
// mount: a Shared policy sees no route there, even observed (the handler
// label stays empty), and a named PerRoute policy has its one bucket.
func TestUseMountLooksUpOnlyForRouteBuckets(t *testing.T) {
	for _, p := range []limit.Policy{{Limit: 10}, {Limit: 10, Scope: limit.PerRoute, Name: "api"}} {
		rec := &limittest.Recorder{}
		l := limittest.MustNew(limittest.NewStore(nil), p, limit.WithObserver(rec))
		h := apiApp(fiber.Config{}, "app-use", fiberlimit.New(l), false).Handler()
		if got := serveFast(h, "GET", "/v1/notes/1"); got != 200 {
			t.Fatalf("%+v: %d", p, got)
		}
		if e := rec.Last(); e.Handler != "" {
			t.Fatalf("%+v: handler label %q, want none (not looked up)", p, e.Handler)
		}
	}
}

// On the allowed path a Shared policy in a Use mount allocates no more than
// at route level, and a PerRoute policy's lookup of a route without
// parameters allocates nothing; a route with parameters costs
// fiber.RoutePatternMatch's parse, once.
func TestUseMountAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	allocs := func(p limit.Policy, mount bool, path string) float64 {
		l := limittest.MustNew(limittest.NewStore(limittest.NewClock(time.Unix(0, 0)).Now), p)
		app := fiber.New()
		ok := func(fiber.Ctx) error { return nil }
		if mount {
			app.Use(fiberlimit.New(l))
			app.Get("/v1/notes/:id", ok)
			app.Get("/v1/login", ok)
		} else {
			app.Get("/v1/notes/:id", fiberlimit.New(l), ok)
			app.Get("/v1/login", fiberlimit.New(l), ok)
		}
		h := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod("GET")
		req.SetRequestURI(path)
		var fc fasthttp.RequestCtx
		fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
		serve := func() { fc.Response.Reset(); h(&fc) }
		serve()
		return testing.AllocsPerRun(200, serve)
	}
	big := int64(1 << 20)
	shared := limit.Policy{Limit: big, Window: time.Hour}
	perRoute := limit.Policy{Limit: big, Window: time.Hour, Scope: limit.PerRoute}
	if use, route := allocs(shared, true, "/v1/notes/7"), allocs(shared, false, "/v1/notes/7"); use > route {
		t.Fatalf("Shared: %.1f allocations per request in a Use mount, %.1f at route level: the lookup ran", use, route)
	}
	if use, route := allocs(perRoute, true, "/v1/login"), allocs(perRoute, false, "/v1/login"); use > route {
		t.Fatalf("PerRoute, a route without parameters: %.1f allocations per request in a Use mount, %.1f at route level", use, route)
	}
	use, route := allocs(perRoute, true, "/v1/notes/7"), allocs(perRoute, false, "/v1/notes/7")
	t.Logf("PerRoute /v1/notes/:id: %.1f allocations per request in a Use mount, %.1f at route level", use, route)
	if use > route+3 { // one RoutePatternMatch on v3.1.0: 3
		t.Fatalf("PerRoute /v1/notes/:id: %.1f allocations in a Use mount, %.1f at route level: more than one parse", use, route)
	}
}

// Concurrent first requests build the route lists once per method and all
// find their routes (run with -race).
func TestUseMountConcurrentLookups(t *testing.T) {
	rec := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1 << 20, Scope: limit.PerRoute}, limit.WithObserver(rec))
	h := apiApp(fiber.Config{}, "group-arg", fiberlimit.New(l), false).Handler()
	paths := []struct{ method, path string }{{"GET", "/v1/notes/1"}, {"HEAD", "/v1/users/ann"}, {"POST", "/v1/login"}, {"GET", "/v1/files/x"}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				q := paths[(g+i)%len(paths)]
				if got := serveFast(h, q.method, q.path); got != 200 {
					t.Errorf("%s %s: %d", q.method, q.path, got)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, e := range rec.Decisions() {
		if e.Handler == "" {
			t.Fatalf("a decision without the route: %+v", e)
		}
	}
	if n := rec.Issues(limit.Issue("route-unknown")); n != 0 {
		t.Fatalf("%d route-unknown issues, want 0", n)
	}
}

// BenchmarkUseMount measures one allowed request to the last of n routes
// (a route with a parameter, /r<n>/:id) with a PerRoute limiter at route
// level or in app.Use, where it looks the route up: the walk over the
// method's routes and one fiber.RoutePatternMatch. No socket: the fasthttp
// context is reused.
func BenchmarkUseMount(b *testing.B) {
	for _, n := range []int{4, 64} {
		for _, mount := range []string{"route", "use"} {
			b.Run(fmt.Sprintf("routes=%d/%s", n, mount), func(b *testing.B) {
				l := limittest.MustNew(limittest.NewStore(limittest.NewClock(time.Unix(0, 0)).Now),
					limit.Policy{Limit: 1 << 40 / 3_600_000, Window: time.Hour, Scope: limit.PerRoute})
				app := fiber.New()
				ok := func(fiber.Ctx) error { return nil }
				if mount == "use" {
					app.Use(fiberlimit.New(l))
				}
				for i := range n {
					if mount == "use" {
						app.Get(fmt.Sprintf("/r%d/:id", i), ok)
					} else {
						app.Get(fmt.Sprintf("/r%d/:id", i), fiberlimit.New(l), ok)
					}
				}
				h := app.Handler()
				var req fasthttp.Request
				req.Header.SetMethod("GET")
				req.SetRequestURI(fmt.Sprintf("/r%d/7", n-1))
				var fc fasthttp.RequestCtx
				fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
				b.ReportAllocs()
				for b.Loop() {
					fc.Response.Reset()
					h(&fc)
				}
			})
		}
	}
}
