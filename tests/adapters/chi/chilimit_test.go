package chilimit_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
)

// newStore returns a reference store at a fake clock.
func newStore() *limittest.Store {
	return limittest.NewStore(limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Now)
}

type counter struct{ n atomic.Int64 }

func (c *counter) handler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// routes builds the same API under each kind of chi mount and returns the
// router; mount says where the limiter goes.
func routes(mount string, mw func(http.Handler) http.Handler, h http.HandlerFunc) http.Handler {
	notes := func(r chi.Router, path string) { // GET and HEAD, as CheckMounts asks
		r.Get(path, h)
		r.Head(path, h)
	}
	r := chi.NewRouter()
	switch mount {
	case "root-use":
		r.Use(mw)
		notes(r, "/v1/notes/{id}")
	case "group":
		r.Group(func(g chi.Router) {
			g.Use(mw)
			notes(g, "/v1/notes/{id}")
		})
	case "route":
		r.Route("/v1", func(sub chi.Router) {
			sub.Use(mw)
			notes(sub, "/notes/{id}")
		})
	case "with":
		notes(r.With(mw), "/v1/notes/{id}")
	case "mount":
		sub := chi.NewRouter()
		sub.Use(mw)
		notes(sub, "/notes/{id}")
		r.Mount("/v1", sub)
	}
	return r
}

func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/{id}", []string{"root-use", "group", "route", "with", "mount"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			srv := httptest.NewServer(routes(mount, chilimit.Middleware(l), func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "note")
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		})
}

// The middleware adds no allocation of its own on the allowed path at the
// default disclosure (the engine + reference store add none either), and at
// most 3 with RateLimit headers on every response.
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	for _, tt := range []struct {
		name string
		d    limit.Disclosure
		max  float64
	}{{"default", limit.DiscloseRetryAfter, 0}, {"always", limit.DiscloseAlways, 3}} {
		t.Run(tt.name, func(t *testing.T) {
			l := limittest.MustNew(newStore(), limit.Policy{Limit: 1 << 20, Window: time.Hour, Disclosure: tt.d})
			h := chilimit.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequest("GET", "/v1/notes/1", nil)
			r.RemoteAddr = "192.0.2.10:5555"
			w := limittest.NewSink()
			h.ServeHTTP(w, r)
			got := testing.AllocsPerRun(500, func() {
				clear(w.H)
				h.ServeHTTP(w, r)
			})
			if got > tt.max {
				t.Fatalf("%.1f allocations per allowed request, want at most %.0f", got, tt.max)
			}
		})
	}
}

func TestConformance(t *testing.T) { redistest.Matrix(t, harness{}) }

// harness builds a chi router for a conformance App: global limiters with
// r.Use, groups as r.Route subrouters with Use, route limiters with r.With.
type harness struct{}

func (harness) Name() string { return "chi" }

func (harness) KeyFunc(name string) func(limit.Request) (string, error) {
	return chilimit.KeyFunc(func(r *http.Request) (string, error) { return r.Header.Get(name), nil })
}

func (harness) CostFunc(name string) func(limit.Request) int64 {
	return chilimit.CostFunc(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.URL.Query().Get(name), 10, 64); return n })
}

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
