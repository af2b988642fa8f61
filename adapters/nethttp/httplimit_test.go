package httplimit_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// epoch is a whole minute, so aligned windows start at it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t testing.TB) (*memstore.Store, *limittest.Clock) {
	t.Helper()
	clock := limittest.NewClock(epoch)
	s, err := memstore.New(memstore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

// engineResponse is what the engine itself answers to the (n+1)th request of
// one client under p, on a fresh store at epoch: the response an adapter must
// reproduce exactly.
func engineResponse(t *testing.T, p limit.Policy, n int) limit.Response {
	t.Helper()
	store, _ := newStore(t)
	l := limit.MustNew(store, p)
	req := limit.Request{Peer: "192.0.2.1:1"}
	for range n {
		l.Check(context.Background(), req)
	}
	return l.Check(context.Background(), req)
}

// counter counts handler runs and answers with a fixed status and body.
type counter struct{ n atomic.Int64 }

func (c *counter) handler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		w.Header().Set("X-Handler", "yes")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func TestGlobalMountPerPeerBudgets(t *testing.T) {
	p := limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true,
		Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}
	store, _ := newStore(t)
	l := limit.MustNew(store, p)
	var hits counter
	mux := http.NewServeMux()
	mux.Handle("GET /ping", hits.handler(http.StatusCreated, "pong"))
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()

	a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
	for i := range 3 {
		r := conformance.Do(t, a, "GET", srv.URL+"/ping")
		if r.Status != http.StatusCreated || r.Body != "pong" || r.Header.Get("X-Handler") != "yes" {
			t.Fatalf("request %d from A: %d %q, want the handler's 201 pong", i, r.Status, r.Body)
		}
	}
	r := conformance.Do(t, a, "GET", srv.URL+"/ping")
	conformance.AssertDenial(t, r, engineResponse(t, p, 3))
	if r.Header.Get("X-Handler") != "" || hits.n.Load() != 3 {
		t.Fatalf("handler ran for a denied request (runs %d)", hits.n.Load())
	}
	// B has its own budget.
	if r := conformance.Do(t, b, "GET", srv.URL+"/ping"); r.Status != http.StatusCreated {
		t.Fatalf("first request from B: %d, want 201", r.Status)
	}
}

// routes builds the same API under each kind of ServeMux mount; mount says
// where the limiter goes.
func routes(mount string, mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
	mux := http.NewServeMux()
	switch mount {
	case "wrap-mux":
		mux.Handle("GET /v1/notes/{id}", h)
		return mw(mux)
	case "route":
		mux.Handle("GET /v1/notes/{id}", mw(h))
	case "sub-mux":
		v1 := http.NewServeMux()
		v1.Handle("GET /v1/notes/{id}", h)
		mux.Handle("/v1/", mw(v1))
	case "method-less":
		mux.Handle("/v1/notes/{id}", mw(h))
	case "wildcard":
		mux.Handle("GET /v1/notes/{id...}", mw(h))
	}
	return mux
}

func TestPerRouteBucketOnEveryMount(t *testing.T) {
	for _, mount := range []string{"wrap-mux", "route", "sub-mux", "method-less", "wildcard"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			store, _ := newStore(t)
			obs := &conformance.Recorder{}
			l := limit.MustNew(store, limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
				limit.WithObserver(obs))
			var hits counter
			srv := httptest.NewServer(routes(mount, httplimit.Middleware(l), hits.handler(http.StatusOK, "note")))
			defer srv.Close()
			c := limittest.ClientFrom("127.0.0.4")
			// ids 1, 2 and 3, GET and HEAD: one bucket of 4.
			reqs := []struct{ method, path string }{{"GET", "/v1/notes/1"}, {"GET", "/v1/notes/2"}, {"HEAD", "/v1/notes/3"}, {"HEAD", "/v1/notes/1"}}
			for _, q := range reqs {
				if r := conformance.Do(t, c, q.method, srv.URL+q.path); r.Status != http.StatusOK {
					t.Fatalf("%s %s: %d, want 200", q.method, q.path, r.Status)
				}
			}
			if r := conformance.Do(t, c, "GET", srv.URL+"/v1/notes/99"); r.Status != http.StatusTooManyRequests {
				t.Fatalf("5th request on the route: %d, want 429 (ids, GET and HEAD share one bucket)", r.Status)
			}
			if got := obs.Last().Bucket; got != "/v1/notes/{id} 4p60f" {
				t.Fatalf("bucket %q, want the route template bucket", got)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != 0 {
				t.Fatalf("%d route-unknown issues, want 0", n)
			}
			if hits.n.Load() != 4 {
				t.Fatalf("handler ran %d times, want 4", hits.n.Load())
			}
			// Another client has its own bucket on the same route.
			if r := conformance.Do(t, limittest.ClientFrom("127.0.0.5"), "GET", srv.URL+"/v1/notes/1"); r.Status != http.StatusOK {
				t.Fatalf("other client: %d, want 200", r.Status)
			}
		})
	}
}

func TestHandlerLabelIsThePattern(t *testing.T) {
	store, _ := newStore(t)
	obs := &conformance.Recorder{}
	l := limit.MustNew(store, limit.Policy{}, limit.WithObserver(obs))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()
	conformance.Do(t, limittest.ClientFrom("127.0.0.6"), "HEAD", srv.URL+"/v1/notes/5")
	if e := obs.Last(); e.Handler != "GET /v1/notes/{id}" || e.Bucket != "100p60" {
		t.Fatalf("event %+v, want handler \"GET /v1/notes/{id}\" in the shared bucket", e)
	}
}

// Several global limiters stacked on one mux all see the route: each mount
// looks it up in the mux the innermost one wraps.
func TestStackedMountsSeeTheRoute(t *testing.T) {
	store, _ := newStore(t)
	obs := &conformance.Recorder{}
	outer := limit.MustNew(store, limit.Policy{Limit: 2, Scope: limit.PerRoute}, limit.WithObserver(obs))
	inner, err := outer.With(limit.Policy{Limit: 3, Scope: limit.PerRoute})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(outer)(httplimit.Middleware(inner)(mux)))
	defer srv.Close()
	conformance.Do(t, limittest.ClientFrom("127.0.0.12"), "GET", srv.URL+"/v1/notes/1")
	var buckets []string
	for _, e := range obs.Decisions() {
		buckets = append(buckets, e.Bucket)
	}
	if want := []string{"/v1/notes/{id} 2p60", "/v1/notes/{id} 3p60"}; !slices.Equal(buckets, want) {
		t.Fatalf("buckets %q, want %q (outer, then inner)", buckets, want)
	}
	if n := obs.Issues(limit.IssueRouteUnknown); n != 0 {
		t.Fatalf("%d route-unknown issues, want 0", n)
	}
}

func TestUnknownRouteFallsBackToShared(t *testing.T) {
	tests := []struct {
		name string
		path string
		wrap bool // the mux is wrapped by other middleware before the limiter
	}{
		{"not_found", "/nothing", false},
		{"method_not_allowed", "/v1/notes/1", false}, // POST on a GET pattern
		{"mux_hidden_by_other_middleware", "/v1/notes/1", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store, _ := newStore(t)
			obs := &conformance.Recorder{}
			l := limit.MustNew(store, limit.Policy{Limit: 1, Scope: limit.PerRoute}, limit.WithObserver(obs))
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
			var h http.Handler = mux
			if tc.wrap {
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) })
			}
			srv := httptest.NewServer(httplimit.Middleware(l)(h))
			defer srv.Close()
			method := "GET"
			if tc.name == "method_not_allowed" {
				method = "POST"
			}
			conformance.Do(t, limittest.ClientFrom("127.0.0.7"), method, srv.URL+tc.path)
			if got := obs.Last().Bucket; got != "1p60" {
				t.Fatalf("bucket %q, want the Shared fallback \"1p60\"", got)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != 1 {
				t.Fatalf("%d route-unknown issues, want 1", n)
			}
		})
	}
}

// A CONNECT request the mux would redirect to a trailing slash makes
// mux.Handler report the redirect's target path, which the client chose. It
// must not become a bucket (one per path would be unbounded).
func TestConnectRedirectPathIsNotABucket(t *testing.T) {
	store, _ := newStore(t)
	obs := &conformance.Recorder{}
	l := limit.MustNew(store, limit.Policy{Scope: limit.PerRoute}, limit.WithObserver(obs))
	mux := http.NewServeMux()
	mux.HandleFunc("/files/{name}/", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()
	for _, name := range []string{"a1", "b2"} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "CONNECT /files/"+name+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Fatalf("CONNECT /files/%s: %d, want the mux's 307 (the test no longer exercises the redirect)", name, resp.StatusCode)
		}
		if got := obs.Last().Bucket; strings.Contains(got, name) {
			t.Fatalf("bucket %q contains the request path", got)
		}
	}
	// The same path with GET is a redirect too, and reports the real pattern.
	conformance.Do(t, limittest.ClientFrom("127.0.0.8"), "GET", srv.URL+"/files/c3")
	if got := obs.Last().Bucket; got != "/files/{name}/ 100p60" {
		t.Fatalf("GET redirect bucket %q, want the pattern's", got)
	}
}

func TestAllowedResponseKeepsHandlerAndAddsEngineFields(t *testing.T) {
	p := limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, AlignWindows: true,
		HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}
	store, _ := newStore(t)
	mux := http.NewServeMux()
	var hits counter
	mux.Handle("GET /x", hits.handler(http.StatusAccepted, "accepted"))
	srv := httptest.NewServer(httplimit.Middleware(limit.MustNew(store, p))(mux))
	defer srv.Close()
	r := conformance.Do(t, limittest.ClientFrom("127.0.0.9"), "GET", srv.URL+"/x")
	if r.Status != http.StatusAccepted || r.Body != "accepted" || r.Header.Get("X-Handler") != "yes" {
		t.Fatalf("%d %q, want the handler's 202 accepted", r.Status, r.Body)
	}
	conformance.AssertEngineFields(t, r.Header, engineResponse(t, p, 0))
}

func TestKeyFuncOverRequest(t *testing.T) {
	store, _ := newStore(t)
	l := limit.MustNew(store, limit.Policy{Limit: 1, KeyFunc: httplimit.KeyFunc(func(r *http.Request) (string, error) {
		return r.Header.Get("X-Api-Key"), nil
	})})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()
	c := limittest.ClientFrom("127.0.0.10")
	send := func(key string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if send("k1") != 200 || send("k2") != 200 {
		t.Fatal("first request of each key was denied")
	}
	if got := send("k1"); got != http.StatusTooManyRequests {
		t.Fatalf("second request with key k1: %d, want 429 (keys share one peer but not a budget)", got)
	}
}

func TestCostFuncOverRequest(t *testing.T) {
	store, _ := newStore(t)
	l := limit.MustNew(store, limit.Policy{Limit: 3, CostFunc: httplimit.CostFunc(func(r *http.Request) int64 {
		if r.URL.Query().Get("expensive") == "1" {
			return 3
		}
		return 0
	})})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /search", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(httplimit.Middleware(l)(mux))
	defer srv.Close()
	c := limittest.ClientFrom("127.0.0.11")
	if r := conformance.Do(t, c, "GET", srv.URL+"/search"); r.Status != 200 {
		t.Fatalf("cheap search: %d", r.Status)
	}
	if r := conformance.Do(t, c, "GET", srv.URL+"/search?expensive=1"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("expensive search with 2 of 3 left: %d, want 429", r.Status)
	}
	if r := conformance.Do(t, c, "GET", srv.URL+"/search"); r.Status != 200 {
		t.Fatalf("a denied expensive search consumed the quota: %d", r.Status)
	}
}
