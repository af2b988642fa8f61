package ginlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no debug route listing on stdout
	os.Exit(m.Run())
}

// epoch is a whole minute, so aligned windows start at it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(limittest.NewClock(epoch).Now))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// engineResponse is what the engine itself answers to the (n+1)th request of
// one client under p, on a fresh store at epoch: the response the adapter
// must reproduce exactly.
func engineResponse(t *testing.T, p limit.Policy, n int) limit.Response {
	t.Helper()
	l := limit.MustNew(newStore(t), p)
	req := limit.Request{Peer: "192.0.2.1:1"}
	for range n {
		l.Check(context.Background(), req)
	}
	return l.Check(context.Background(), req)
}

// counter counts handler runs and answers with a fixed status and body.
type counter struct{ n atomic.Int64 }

func (c *counter) handler(status int, body string) gin.HandlerFunc {
	return func(gc *gin.Context) {
		c.n.Add(1)
		gc.Header("X-Handler", "yes")
		gc.String(status, body)
	}
}

func serve(t *testing.T, r *gin.Engine) string {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestGlobalMountPerPeerBudgets(t *testing.T) {
	for _, disc := range []limit.Disclosure{limit.DiscloseOnLimit, limit.DiscloseNone} {
		t.Run(map[limit.Disclosure]string{limit.DiscloseOnLimit: "on-limit", limit.DiscloseNone: "none"}[disc], func(t *testing.T) {
			p := limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true,
				Disclosure: disc, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}
			l := limit.MustNew(newStore(t), p)
			var hits counter
			r := gin.New()
			r.Use(ginlimit.Middleware(l))
			r.GET("/ping", hits.handler(http.StatusCreated, "pong"))
			url := serve(t, r)

			a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
			for i := range 3 {
				rep := conformance.Do(t, a, "GET", url+"/ping")
				if rep.Status != http.StatusCreated || rep.Body != "pong" || rep.Header.Get("X-Handler") != "yes" {
					t.Fatalf("request %d from A: %d %q, want the handler's 201 pong", i, rep.Status, rep.Body)
				}
			}
			rep := conformance.Do(t, a, "GET", url+"/ping")
			conformance.AssertDenial(t, rep, engineResponse(t, p, 3))
			if rep.Header.Get("X-Handler") != "" || hits.n.Load() != 3 {
				t.Fatalf("handler ran for a denied request (runs %d)", hits.n.Load())
			}
			if rep := conformance.Do(t, b, "GET", url+"/ping"); rep.Status != http.StatusCreated {
				t.Fatalf("first request from B: %d, want 201 (B has its own budget)", rep.Status)
			}
		})
	}
}

// The socket peer is the identity: X-Forwarded-For, which c.ClientIP()
// would believe by default, changes nothing.
func TestForwardingHeadersAreNotTrusted(t *testing.T) {
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 1})
	r := gin.New()
	r.Use(ginlimit.Middleware(l))
	r.GET("/x", func(c *gin.Context) { c.Status(http.StatusOK) })
	url := serve(t, r)
	c := limittest.ClientFrom("127.0.0.4")
	for i, xff := range []string{"198.51.100.1", "198.51.100.2"} {
		req, _ := http.NewRequest("GET", url+"/x", nil)
		req.Header.Set("X-Forwarded-For", xff)
		req.Header.Set("X-Real-Ip", xff)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := []int{200, 429}[i]; resp.StatusCode != want {
			t.Fatalf("request %d claiming %s: %d, want %d", i, xff, resp.StatusCode, want)
		}
	}
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

func TestPerRouteBucketOnEveryMount(t *testing.T) {
	for _, mount := range []string{"engine-use", "group-arg", "group-use", "route"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			obs := &conformance.Recorder{}
			l := limit.MustNew(newStore(t), limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
				limit.WithObserver(obs))
			var hits counter
			url := serve(t, routes(mount, ginlimit.Middleware(l), hits.handler(http.StatusOK, "note")))
			c := limittest.ClientFrom("127.0.0.5")
			// ids 1, 2 and 3, GET and HEAD: one bucket of 4.
			reqs := []struct{ method, path string }{{"GET", "/v1/notes/1"}, {"GET", "/v1/notes/2"}, {"HEAD", "/v1/notes/3"}, {"HEAD", "/v1/notes/1"}}
			for _, q := range reqs {
				if rep := conformance.Do(t, c, q.method, url+q.path); rep.Status != http.StatusOK {
					t.Fatalf("%s %s: %d, want 200", q.method, q.path, rep.Status)
				}
			}
			if rep := conformance.Do(t, c, "GET", url+"/v1/notes/99"); rep.Status != http.StatusTooManyRequests {
				t.Fatalf("5th request on the route: %d, want 429 (ids, GET and HEAD share one bucket)", rep.Status)
			}
			if e := obs.Last(); e.Bucket != "/v1/notes/{id} 4p60f" || e.Handler != "/v1/notes/:id" {
				t.Fatalf("event %+v, want the route template bucket and gin's spelling as handler", e)
			}
			if hits.n.Load() != 4 {
				t.Fatalf("handler ran %d times, want 4", hits.n.Load())
			}
			if rep := conformance.Do(t, limittest.ClientFrom("127.0.0.6"), "GET", url+"/v1/notes/1"); rep.Status != http.StatusOK {
				t.Fatalf("other client: %d, want 200 (its own bucket)", rep.Status)
			}
		})
	}
}

func TestNotFoundFallsBackToShared(t *testing.T) {
	obs := &conformance.Recorder{}
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
	r := gin.New()
	r.Use(ginlimit.Middleware(l))
	r.GET("/x", func(*gin.Context) {})
	rep := conformance.Do(t, limittest.ClientFrom("127.0.0.7"), "GET", serve(t, r)+"/nothing")
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

func TestAllowedResponseKeepsHandler(t *testing.T) {
	p := limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, AlignWindows: true,
		HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}
	r := gin.New()
	r.Use(ginlimit.Middleware(limit.MustNew(newStore(t), p)))
	var hits counter
	r.GET("/x", hits.handler(http.StatusAccepted, "accepted"))
	rep := conformance.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", serve(t, r)+"/x")
	if rep.Status != http.StatusAccepted || rep.Body != "accepted" || rep.Header.Get("X-Handler") != "yes" {
		t.Fatalf("%d %q, want the handler's 202 accepted", rep.Status, rep.Body)
	}
	conformance.AssertEngineFields(t, rep.Header, engineResponse(t, p, 0))
}

func TestKeyAndCostFuncsOverContext(t *testing.T) {
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 3,
		KeyFunc: ginlimit.KeyFunc(func(c *gin.Context) (string, error) {
			if k := c.GetHeader("X-Api-Key"); k != "" {
				return k, nil
			}
			return "", errors.New("no key")
		}),
		CostFunc: ginlimit.CostFunc(func(c *gin.Context) int64 {
			if c.Query("expensive") == "1" {
				return 3
			}
			return 0
		}),
	})
	r := gin.New()
	r.Use(ginlimit.Middleware(l))
	r.GET("/search", func(c *gin.Context) { c.Status(http.StatusOK) })
	url := serve(t, r)
	c := limittest.ClientFrom("127.0.0.9")
	send := func(key, query string) int {
		req, _ := http.NewRequest("GET", url+"/search"+query, nil)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("k1", "?expensive=1"); got != 200 {
		t.Fatalf("k1 expensive: %d, want 200 (3 of 3)", got)
	}
	if got := send("k1", ""); got != http.StatusTooManyRequests {
		t.Fatalf("k1 after spending its quota: %d, want 429", got)
	}
	if got := send("k2", ""); got != 200 {
		t.Fatalf("k2 from the same peer: %d, want 200 (own budget)", got)
	}
	if got := send("", ""); got != 200 {
		t.Fatalf("no key (falls through to the peer): %d, want 200", got)
	}
}
