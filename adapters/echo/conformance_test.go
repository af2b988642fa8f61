package echolimit_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/stores/redis/redistest"
)

// harness builds an echo server for a conformance App: global limiters with
// e.Use, groups with e.Group(prefix, middleware...), route limiters as route
// middleware.
type harness struct{}

func (harness) Name() string { return "echo" }

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

func (harness) KeyFunc(name string) limit.KeyFunc {
	return echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.Request().Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return echolimit.CostFunc(func(c echo.Context) int64 { n, _ := strconv.ParseInt(c.QueryParam(name), 10, 64); return n })
}

func memoryStore(t testing.TB, clock func() time.Time) limit.Store {
	s, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) { conformance.RunAdapter(t, harness{}, "memory", memoryStore) })
	t.Run("redis", func(t *testing.T) { conformance.RunAdapter(t, harness{}, "redis", redistest.Standalone) })
	t.Run("redis-cluster", func(t *testing.T) { conformance.RunAdapter(t, harness{}, "redis-cluster", redistest.Cluster) })
}
