package httplimit_test

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/stores/redis/redistest"
)

// harness builds a ServeMux for a conformance App: global limiters around
// the root mux, each group as a sub-mux under "<prefix>/" wrapped in the
// group's limiters, route limiters around the route's handler. Patterns
// carry the method ("GET /v1/notes/{id}").
type harness struct{}

func (harness) Name() string { return "nethttp" }

// wrap mounts ls around h, the first limiter outermost.
func wrap(ls []*limit.Limiter, h http.Handler) http.Handler {
	for i := len(ls) - 1; i >= 0; i-- {
		h = httplimit.Middleware(ls[i])(h)
	}
	return h
}

func (harness) Serve(t testing.TB, ln net.Listener, app *conformance.App) {
	mux := http.NewServeMux()
	handler := func(rt *conformance.Route) http.Handler {
		return wrap(rt.Limiters, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			name, value, status, body := rt.Serve()
			w.Header().Set(name, value)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}))
	}
	for _, g := range app.Groups {
		sub := http.NewServeMux()
		for _, rt := range g.Routes {
			sub.Handle(rt.Method+" "+rt.Path, handler(rt))
		}
		mux.Handle(g.Prefix+"/", wrap(g.Limiters, sub))
	}
	for _, rt := range app.Routes {
		mux.Handle(rt.Method+" "+rt.Path, handler(rt))
	}
	conformance.ServeHandler(t, ln, wrap(app.Global, mux))
}

func (harness) KeyFunc(name string) limit.KeyFunc {
	return httplimit.KeyFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return httplimit.CostFunc(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.FormValue(name), 10, 64); return n })
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
