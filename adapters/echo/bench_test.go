package echolimit_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// echoWith returns an echo server for GET /v1/notes/:id with the limiter of
// policy p on e.Use, or echo alone when p is nil.
func echoWith(tb testing.TB, p *limit.Policy) *echo.Echo {
	e := echo.New()
	if p != nil {
		s, err := memstore.New()
		if err != nil {
			tb.Fatal(err)
		}
		e.Use(echolimit.Middleware(limit.MustNew(s, *p)))
	}
	e.GET("/v1/notes/:id", func(echo.Context) error { return nil })
	return e
}

// BenchmarkMiddleware measures one allowed request through echo with the
// middleware on e.Use, Shared and PerRoute; "echo-only" is echo alone. Echo
// applies e.Use middleware per request (applyMiddleware in ServeHTTP), so
// any middleware closure costs one allocation there.
func BenchmarkMiddleware(b *testing.B) {
	shared := limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute}
	perRoute := shared
	perRoute.Scope = limit.PerRoute
	for _, c := range []struct {
		name string
		p    *limit.Policy
	}{{"echo-only", nil}, {"shared", &shared}, {"per-route", &perRoute}} {
		b.Run(c.name, func(b *testing.B) {
			e := echoWith(b, c.p)
			r := httptest.NewRequest("GET", "/v1/notes/7", nil)
			r.RemoteAddr = "192.0.2.1:4711"
			w := limittest.NewSink()
			b.ReportAllocs()
			for b.Loop() {
				e.ServeHTTP(w, r)
			}
		})
	}
}

// On the allowed path at the default disclosure the only allocation is the
// middleware closure echo builds per request for e.Use middleware.
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	e := echoWith(t, &limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	r := httptest.NewRequest("GET", "/v1/notes/7", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := limittest.NewSink()
	e.ServeHTTP(w, r)
	if got := testing.AllocsPerRun(500, func() { e.ServeHTTP(w, r) }); got > 1 {
		t.Fatalf("%.1f allocations per allowed request, want at most 1 (echo's per-request chain)", got)
	}
}
