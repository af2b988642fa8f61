package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	fiberv2 "github.com/gofiber/fiber/v2"
	fiberv3 "github.com/gofiber/fiber/v3"
	echov4 "github.com/labstack/echo/v4"
	echov5 "github.com/labstack/echo/v5"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	echov5limit "github.com/quotagate/quotagate/adapters/echov5"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiber"
	fiberv3limit "github.com/quotagate/quotagate/adapters/fiberv3"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/valyala/fasthttp"
)

// BenchmarkRouterMajors measures one allowed request (GET /v1/notes/7 from
// one client) through each major version of echo and fiber that the suite
// has an adapter for, in process (no socket): the router alone ("-only"),
// and with the middleware on the router's global mount (e.Use, app.Use;
// Shared) and on the route (PerRoute), memory store. echo serves an
// *http.Request into a discarding writer; fiber a reused fasthttp context.
// The module builds both fiber majors on one fasthttp, the newer one's
// (decision 0067). Loaded cores drift, so the contenders run in rotated
// order, three rounds ("#01", "#02"): compare medians. A major's cost is
// its row less its "-only" row.
func BenchmarkRouterMajors(b *testing.B) {
	type contender struct {
		name  string
		serve func()
	}
	newLimiter := func(scope limit.Scope) *limit.Limiter {
		s, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		return limittest.MustNew(s, limit.Policy{Limit: quota, Window: window, Scope: scope})
	}
	var cs []contender
	for _, mount := range []string{"only", "shared", "per-route"} {
		scope := limit.Shared
		if mount == "per-route" {
			scope = limit.PerRoute
		}

		e4 := echov4.New()
		h4 := func(echov4.Context) error { return nil }
		switch mount {
		case "only":
			e4.GET("/v1/notes/:id", h4)
		case "shared":
			e4.Use(echolimit.Middleware(newLimiter(scope)))
			e4.GET("/v1/notes/:id", h4)
		default:
			e4.GET("/v1/notes/:id", h4, echolimit.Middleware(newLimiter(scope)))
		}
		cs = append(cs, contender{"echo-v4-" + mount, serveHTTP(e4)})

		e5 := echov5.New()
		h5 := func(*echov5.Context) error { return nil }
		switch mount {
		case "only":
			e5.GET("/v1/notes/:id", h5)
		case "shared":
			e5.Use(echov5limit.Middleware(newLimiter(scope)))
			e5.GET("/v1/notes/:id", h5)
		default:
			e5.GET("/v1/notes/:id", h5, echov5limit.Middleware(newLimiter(scope)))
		}
		cs = append(cs, contender{"echo-v5-" + mount, serveHTTP(e5)})

		f2 := fiberv2.New(fiberv2.Config{DisableStartupMessage: true})
		g2 := func(*fiberv2.Ctx) error { return nil }
		switch mount {
		case "only":
			f2.Get("/v1/notes/:id", g2)
		case "shared":
			f2.Use(fiberlimit.New(newLimiter(scope)))
			f2.Get("/v1/notes/:id", g2)
		default:
			f2.Get("/v1/notes/:id", fiberlimit.New(newLimiter(scope)), g2)
		}
		cs = append(cs, contender{"fiber-v2-" + mount, serveFast(f2.Handler())})

		f3 := fiberv3.New()
		g3 := func(fiberv3.Ctx) error { return nil }
		switch mount {
		case "only":
			f3.Get("/v1/notes/:id", g3)
		case "shared":
			f3.Use(fiberv3limit.New(newLimiter(scope)))
			f3.Get("/v1/notes/:id", g3)
		default:
			f3.Get("/v1/notes/:id", fiberv3limit.New(newLimiter(scope)), g3)
		}
		cs = append(cs, contender{"fiber-v3-" + mount, serveFast(f3.Handler())})
	}
	for round := range 3 {
		for i := range cs {
			c := cs[(i+round)%len(cs)]
			b.Run(c.name, func(b *testing.B) {
				c.serve()
				b.ReportAllocs()
				for b.Loop() {
					c.serve()
				}
			})
		}
	}
}

// serveHTTP returns a function that serves GET /v1/notes/7 from
// 192.0.2.1:4711 to h, into a writer that discards.
func serveHTTP(h http.Handler) func() {
	r := httptest.NewRequest("GET", "/v1/notes/7", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := limittest.NewSink()
	return func() { h.ServeHTTP(w, r) }
}

// serveFast returns a function that serves GET /v1/notes/7 from
// 192.0.2.1:4711 to a fasthttp handler, reusing one context.
func serveFast(h fasthttp.RequestHandler) func() {
	var req fasthttp.Request
	req.SetRequestURI("/v1/notes/7")
	req.Header.SetMethod("GET")
	var fc fasthttp.RequestCtx
	fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
	return func() {
		fc.Response.Reset()
		h(&fc)
	}
}
