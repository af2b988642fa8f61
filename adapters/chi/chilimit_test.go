package chilimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
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
	r := chi.NewRouter()
	switch mount {
	case "root-use":
		r.Use(mw)
		r.Get("/v1/notes/{id}", h)
		r.Head("/v1/notes/{id}", h)
	case "group":
		r.Group(func(g chi.Router) {
			g.Use(mw)
			g.Get("/v1/notes/{id}", h)
			g.Head("/v1/notes/{id}", h)
		})
	case "route":
		r.Route("/v1", func(sub chi.Router) {
			sub.Use(mw)
			sub.Get("/notes/{id}", h)
			sub.Head("/notes/{id}", h)
		})
	case "with":
		r.With(mw).Get("/v1/notes/{id}", h)
		r.With(mw).Head("/v1/notes/{id}", h)
	case "mount":
		sub := chi.NewRouter()
		sub.Use(mw)
		sub.Get("/notes/{id}", h)
		sub.Head("/notes/{id}", h)
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
