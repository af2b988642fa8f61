package chilimit_test

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/stores/redis/redistest"
)

// harness builds a chi router for a conformance App: global limiters with
// r.Use, groups as r.Route subrouters with Use, route limiters with r.With.
type harness struct{}

func (harness) Name() string { return "chi" }

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	r := chi.NewRouter()
	for _, l := range app.Global {
		r.Use(chilimit.Middleware(l))
	}
	add := func(r chi.Router, rt *conformance.Route, path string) {
		var mws chi.Middlewares
		for _, l := range rt.Limiters {
			mws = append(mws, chilimit.Middleware(l))
		}
		r.With(mws...).Method(rt.Method, path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			name, value, status, body := rt.Serve()
			w.Header().Set(name, value)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}))
	}
	for _, g := range app.Groups {
		r.Route(g.Prefix, func(sub chi.Router) {
			for _, l := range g.Limiters {
				sub.Use(chilimit.Middleware(l))
			}
			for _, rt := range g.Routes {
				add(sub, rt, rt.Relative(g.Prefix))
			}
		})
	}
	for _, rt := range app.Routes {
		add(r, rt, rt.Path)
	}
	conformance.ServeHandler(t, ln, r)
}

func (harness) KeyFunc(name string) limit.KeyFunc {
	return chilimit.KeyFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return chilimit.CostFunc(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.URL.Query().Get(name), 10, 64); return n })
}

func TestConformance(t *testing.T) {
	memory := func(t testing.TB, clock func() time.Time) limit.Store {
		s, err := memstore.New(memstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("memory", func(t *testing.T) { conformance.RunAdapter(t, harness{}, "memory", memory) })
	t.Run("redis", func(t *testing.T) { conformance.RunAdapter(t, harness{}, "redis", redistest.Standalone) })
	t.Run("redis-cluster", func(t *testing.T) { conformance.RunAdapter(t, harness{}, "redis-cluster", redistest.Cluster) })
}
