package fiberlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiber"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/valyala/fasthttp"
)

// newStore returns a memory store, as the benchmarks of main measured.
func newStore(tb testing.TB) *memstore.Store {
	s, err := memstore.New()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkHandler measures one allowed request through fiber's handler
// with the limiter on app.Use (Shared) or at route level (PerRoute);
// "fiber-only" is fiber alone. No socket: the fasthttp context is reused.
func BenchmarkHandler(b *testing.B) {
	for _, name := range []string{"fiber-only", "shared", "per-route"} {
		b.Run(name, func(b *testing.B) {
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			h := func(*fiber.Ctx) error { return nil }
			switch name {
			case "fiber-only":
				app.Get("/v1/notes/:id", h)
			case "shared":
				app.Use(fiberlimit.New(limit.MustNew(newStore(b), limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute})))
				app.Get("/v1/notes/:id", h)
			case "per-route":
				l := limit.MustNew(newStore(b), limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute, Scope: limit.PerRoute})
				app.Get("/v1/notes/:id", fiberlimit.New(l), h)
			}
			handler := app.Handler()
			var req fasthttp.Request
			req.SetRequestURI("/v1/notes/7")
			req.Header.SetMethod("GET")
			var fc fasthttp.RequestCtx
			fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
			b.ReportAllocs()
			for b.Loop() {
				fc.Response.Reset()
				handler(&fc)
			}
		})
	}
}

// On the allowed path at the default disclosure the handler allocates the
// two copies it must make: the request path and the peer address text.
func TestHandlerAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/v1/notes/:id", fiberlimit.New(l), func(*fiber.Ctx) error { return nil })
	handler := app.Handler()
	var req fasthttp.Request
	req.SetRequestURI("/v1/notes/7")
	req.Header.SetMethod("GET")
	var fc fasthttp.RequestCtx
	fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, nil)
	handler(&fc)
	got := testing.AllocsPerRun(500, func() {
		fc.Response.Reset()
		handler(&fc)
	})
	if got > 2 {
		t.Fatalf("%.1f allocations per allowed request, want at most 2 (path and peer copies)", got)
	}
}
