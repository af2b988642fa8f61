package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no debug route listing on stdout
	os.Exit(m.Run())
}

func serve(t *testing.T, r *gin.Engine) string {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// routes builds the same API under each kind of gin mount; mount says where
// the limiter goes.
func routes(mount string, mw, h gin.HandlerFunc) *gin.Engine {
	r := gin.New()
	switch mount {
	case "engine-use":
		r.Use(mw)
		r.GET("/v1/notes/:id", h)
		r.HEAD("/v1/notes/:id", h)
	case "group-arg":
		g := r.Group("/v1", mw)
		g.GET("/notes/:id", h)
		g.HEAD("/notes/:id", h)
	case "group-use":
		g := r.Group("/v1")
		g.Use(mw)
		g.GET("/notes/:id", h)
		g.HEAD("/notes/:id", h)
	case "route":
		r.GET("/v1/notes/:id", mw, h)
		r.HEAD("/v1/notes/:id", mw, h)
	}
	return r
}

// gin sets c.FullPath() before the whole chain runs: every mount sees the
// route, spelt gin's way in the handler label.
func TestPerRouteBucketOnEveryMount(t *testing.T) {
	conformance.CheckMounts(t, "/v1/notes/:id", []string{"engine-use", "group-arg", "group-use", "route"},
		func(t *testing.T, mount string, l *limit.Limiter) string {
			return serve(t, routes(mount, ginlimit.Middleware(l), func(c *gin.Context) { c.String(http.StatusOK, "note") }))
		})
}

// gin runs engine-level middleware on 404s too, with no route: a PerRoute
// policy falls back to its Shared bucket and reports route-unknown.
func TestNotFoundFallsBackToShared(t *testing.T) {
	obs := &limittest.Recorder{}
	l := limit.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
	r := gin.New()
	r.Use(ginlimit.Middleware(l))
	r.GET("/x", func(*gin.Context) {})
	rep := limittest.Do(t, limittest.ClientFrom("127.0.0.7"), "GET", serve(t, r)+"/nothing")
	if rep.Status != http.StatusNotFound {
		t.Fatalf("status %d, want gin's 404", rep.Status)
	}
	if got := obs.Last().Bucket; got != "2p60" {
		t.Fatalf("bucket %q, want the Shared fallback", got)
	}
	if n := obs.Issues(limit.IssueRouteUnknown); n != 1 {
		t.Fatalf("%d route-unknown issues, want 1", n)
	}
}
