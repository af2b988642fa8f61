package ginlimit_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// engineWith returns a gin engine serving GET /v1/notes/:id, with the
// limiter of policy p on r.Use unless p is nil ("gin-only").
func engineWith(tb testing.TB, p *limit.Policy) *gin.Engine {
	r := gin.New()
	if p != nil {
		s, err := memstore.New()
		if err != nil {
			tb.Fatal(err)
		}
		r.Use(ginlimit.Middleware(limit.MustNew(s, *p)))
	}
	r.GET("/v1/notes/:id", func(*gin.Context) {})
	return r
}

// BenchmarkMiddleware measures one allowed request through gin with the
// middleware on the engine, Shared and PerRoute; "gin-only" is gin alone.
func BenchmarkMiddleware(b *testing.B) {
	shared := limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute}
	perRoute := shared
	perRoute.Scope = limit.PerRoute
	for _, c := range []struct {
		name string
		p    *limit.Policy
	}{{"gin-only", nil}, {"shared", &shared}, {"per-route", &perRoute}} {
		b.Run(c.name, func(b *testing.B) {
			r := engineWith(b, c.p)
			req := httptest.NewRequest("GET", "/v1/notes/7", nil)
			req.RemoteAddr = "192.0.2.1:4711"
			w := limittest.NewSink()
			b.ReportAllocs()
			for b.Loop() {
				r.ServeHTTP(w, req)
			}
		})
	}
}

// gin and the middleware together allocate nothing on the allowed path at
// the default disclosure.
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	r := engineWith(t, &limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	req := httptest.NewRequest("GET", "/v1/notes/7", nil)
	req.RemoteAddr = "192.0.2.1:4711"
	w := limittest.NewSink()
	r.ServeHTTP(w, req)
	if got := testing.AllocsPerRun(500, func() { r.ServeHTTP(w, req) }); got > 0 {
		t.Fatalf("%.1f allocations per allowed request, want 0", got)
	}
}
