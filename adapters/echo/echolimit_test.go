package echolimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echolimit "github.com/quotagate/quotagate/adapters/echo"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

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

func (c *counter) handler(status int, body string) echo.HandlerFunc {
	return func(ec echo.Context) error {
		c.n.Add(1)
		ec.Response().Header().Set("X-Handler", "yes")
		return ec.String(status, body)
	}
}

func serve(t *testing.T, e *echo.Echo) string {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestGlobalMountPerPeerBudgets(t *testing.T) {
	p := limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true,
		Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}
	l := limit.MustNew(newStore(t), p)
	var hits counter
	e := echo.New()
	e.Use(echolimit.Middleware(l))
	e.GET("/ping", hits.handler(http.StatusCreated, "pong"))
	url := serve(t, e)

	a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
	for i := range 3 {
		r := conformance.Do(t, a, "GET", url+"/ping")
		if r.Status != http.StatusCreated || r.Body != "pong" || r.Header.Get("X-Handler") != "yes" {
			t.Fatalf("request %d from A: %d %q, want the handler's 201 pong", i, r.Status, r.Body)
		}
	}
	r := conformance.Do(t, a, "GET", url+"/ping")
	conformance.AssertDenial(t, r, engineResponse(t, p, 3))
	if r.Header.Get("X-Handler") != "" || hits.n.Load() != 3 {
		t.Fatalf("handler ran for a denied request (runs %d)", hits.n.Load())
	}
	if r := conformance.Do(t, b, "GET", url+"/ping"); r.Status != http.StatusCreated {
		t.Fatalf("first request from B: %d, want 201 (B has its own budget)", r.Status)
	}
}

// The socket peer is the identity: X-Forwarded-For and X-Real-IP, which
// c.RealIP() would believe, change nothing.
func TestForwardingHeadersAreNotTrusted(t *testing.T) {
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 1})
	e := echo.New()
	e.Use(echolimit.Middleware(l))
	e.GET("/x", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	url := serve(t, e)
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

// routes builds the same API under each kind of echo mount; mount says where
// the limiter goes.
func routes(mount string, mw echo.MiddlewareFunc, h echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	both := []string{http.MethodGet, http.MethodHead}
	switch mount {
	case "echo-use":
		e.Use(mw)
		e.Match(both, "/v1/notes/:id", h)
	case "group-arg":
		e.Group("/v1", mw).Match(both, "/notes/:id", h)
	case "group-use":
		g := e.Group("/v1")
		g.Use(mw)
		g.Match(both, "/notes/:id", h)
	case "route":
		e.Match(both, "/v1/notes/:id", h, mw)
	}
	return e
}

func TestPerRouteBucketOnEveryMount(t *testing.T) {
	for _, mount := range []string{"echo-use", "group-arg", "group-use", "route"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			obs := &conformance.Recorder{}
			l := limit.MustNew(newStore(t), limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
				limit.WithObserver(obs))
			var hits counter
			url := serve(t, routes(mount, echolimit.Middleware(l), hits.handler(http.StatusOK, "note")))
			c := limittest.ClientFrom("127.0.0.5")
			// ids 1, 2 and 3, GET and HEAD: one bucket of 4.
			reqs := []struct{ method, path string }{{"GET", "/v1/notes/1"}, {"GET", "/v1/notes/2"}, {"HEAD", "/v1/notes/3"}, {"HEAD", "/v1/notes/1"}}
			for _, q := range reqs {
				if r := conformance.Do(t, c, q.method, url+q.path); r.Status != http.StatusOK {
					t.Fatalf("%s %s: %d, want 200", q.method, q.path, r.Status)
				}
			}
			if r := conformance.Do(t, c, "GET", url+"/v1/notes/99"); r.Status != http.StatusTooManyRequests {
				t.Fatalf("5th request on the route: %d, want 429 (ids, GET and HEAD share one bucket)", r.Status)
			}
			if e := obs.Last(); e.Bucket != "/v1/notes/{id} 4p60f" || e.Handler != "/v1/notes/:id" {
				t.Fatalf("event %+v, want the route template bucket and echo's spelling as handler", e)
			}
			if hits.n.Load() != 4 {
				t.Fatalf("handler ran %d times, want 4", hits.n.Load())
			}
			if r := conformance.Do(t, limittest.ClientFrom("127.0.0.6"), "GET", url+"/v1/notes/1"); r.Status != http.StatusOK {
				t.Fatalf("other client: %d, want 200 (its own bucket)", r.Status)
			}
		})
	}
}

func TestUnmatchedRoutes(t *testing.T) {
	tests := []struct {
		name, path string
		wantBucket string
		wantIssue  int
	}{
		// e.Use sees no route: the Shared fallback, reported.
		{"root_not_found", "/nothing", "2p60", 1},
		// Under a group, echo routes unmatched paths to the group's catch-all.
		{"group_not_found", "/g/nothing", "/g/* 2p60", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &conformance.Recorder{}
			l := limit.MustNew(newStore(t), limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
			e := echo.New()
			h := func(c echo.Context) error { return nil }
			if tc.name == "root_not_found" {
				e.Use(echolimit.Middleware(l))
				e.GET("/x", h)
			} else {
				e.Group("/g", echolimit.Middleware(l)).GET("/x", h)
			}
			r := conformance.Do(t, limittest.ClientFrom("127.0.0.7"), "GET", serve(t, e)+tc.path)
			if r.Status != http.StatusNotFound {
				t.Fatalf("status %d, want echo's 404", r.Status)
			}
			if got := obs.Last().Bucket; got != tc.wantBucket {
				t.Fatalf("bucket %q, want %q", got, tc.wantBucket)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != tc.wantIssue {
				t.Fatalf("%d route-unknown issues, want %d", n, tc.wantIssue)
			}
		})
	}
}

func TestAllowedResponseKeepsHandlerAndError(t *testing.T) {
	p := limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, AlignWindows: true,
		HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}
	e := echo.New()
	e.Use(echolimit.Middleware(limit.MustNew(newStore(t), p)))
	var hits counter
	e.GET("/x", hits.handler(http.StatusAccepted, "accepted"))
	e.GET("/err", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	url := serve(t, e)
	c := limittest.ClientFrom("127.0.0.8")
	r := conformance.Do(t, c, "GET", url+"/x")
	if r.Status != http.StatusAccepted || r.Body != "accepted" || r.Header.Get("X-Handler") != "yes" {
		t.Fatalf("%d %q, want the handler's 202 accepted", r.Status, r.Body)
	}
	conformance.AssertEngineFields(t, r.Header, engineResponse(t, p, 0))
	// A handler's error still reaches echo's error handler.
	if r := conformance.Do(t, c, "GET", url+"/err"); r.Status != http.StatusTeapot {
		t.Fatalf("handler error: %d, want 418", r.Status)
	}
}

func TestKeyAndCostFuncsOverContext(t *testing.T) {
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 3,
		KeyFunc: echolimit.KeyFunc(func(c echo.Context) (string, error) {
			if k := c.Request().Header.Get("X-Api-Key"); k != "" {
				return k, nil
			}
			return "", errors.New("no key")
		}),
		CostFunc: echolimit.CostFunc(func(c echo.Context) int64 {
			if c.QueryParam("expensive") == "1" {
				return 3
			}
			return 0
		}),
	})
	e := echo.New()
	e.Use(echolimit.Middleware(l))
	e.GET("/search", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	url := serve(t, e)
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
