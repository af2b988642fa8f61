package fiberlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiber"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/stores/redis/redistest"
)

// harness builds a fiber app for a conformance App: global limiters with
// app.Use; a group's limiters on each route of an app.Group, before the
// route's own (in a Use mount fiber does not know the matched route yet, so
// PerRoute group limits go at route level, as the package documents).
type harness struct{}

func (harness) Name() string { return "fiber" }

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	a := fiber.New(fiber.Config{DisableStartupMessage: true})
	for _, l := range app.Global {
		a.Use(fiberlimit.New(l))
	}
	chain := func(h fiber.Handler, lss ...[]*limit.Limiter) []fiber.Handler {
		var hs []fiber.Handler
		for _, ls := range lss {
			for _, l := range ls {
				hs = append(hs, fiberlimit.New(l))
			}
		}
		return append(hs, h)
	}
	handler := func(rt *conformance.Route) fiber.Handler {
		return func(c *fiber.Ctx) error {
			name, value, status, body := rt.Serve()
			c.Set(name, value)
			return c.Status(status).SendString(body)
		}
	}
	for _, g := range app.Groups {
		grp := a.Group(g.Prefix)
		for _, rt := range g.Routes {
			grp.Add(rt.Method, conformance.ColonPath(rt.Relative(g.Prefix)), chain(handler(rt), g.Limiters, rt.Limiters)...)
		}
	}
	for _, rt := range app.Routes {
		a.Add(rt.Method, conformance.ColonPath(rt.Path), chain(handler(rt), rt.Limiters)...)
	}
	done := make(chan error, 1)
	go func() { done <- a.Listener(ln) }()
	t.Cleanup(func() {
		a.ShutdownWithTimeout(5 * time.Second)
		<-done
	})
}

func (harness) KeyFunc(name string) limit.KeyFunc {
	return fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) { return c.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return fiberlimit.CostFunc(func(c *fiber.Ctx) int64 { return int64(c.QueryInt(name)) })
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
