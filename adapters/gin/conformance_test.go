package ginlimit_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/stores/redis/redistest"
)

// harness builds a gin engine for a conformance App: global limiters with
// r.Use, groups with r.Group(prefix, middleware...), route limiters before
// the route's handler.
type harness struct{}

func (harness) Name() string { return "gin" }

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	r := gin.New()
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

func (harness) KeyFunc(name string) limit.KeyFunc {
	return ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.GetHeader(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return ginlimit.CostFunc(func(c *gin.Context) int64 { n, _ := strconv.ParseInt(c.Query(name), 10, 64); return n })
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
