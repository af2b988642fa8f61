package chilimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

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

// do sends one request from the loopback address ip and returns status,
// body and headers.
func do(t *testing.T, c *http.Client, method, url string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

type counter struct{ n atomic.Int64 }

func (c *counter) handler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		w.Header().Set("X-Handler", "yes")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func TestRootMountPerPeerBudgets(t *testing.T) {
	store, _ := newStore(t)
	l := limit.MustNew(store, limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow})
	var hits counter
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/ping", hits.handler(http.StatusCreated, "pong"))
	srv := httptest.NewServer(r)
	defer srv.Close()

	a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
	for i := 0; i < 3; i++ {
		status, body, h := do(t, a, "GET", srv.URL+"/ping")
		if status != http.StatusCreated || body != "pong" || h.Get("X-Handler") != "yes" {
			t.Fatalf("request %d from A: %d %q, want the handler's 201 pong", i, status, body)
		}
	}
	status, body, h := do(t, a, "GET", srv.URL+"/ping")
	if status != http.StatusTooManyRequests {
		t.Fatalf("4th request from A: %d, want 429", status)
	}
	if h.Get("X-Handler") != "" || hits.n.Load() != 3 {
		t.Fatalf("handler ran for a denied request (hits %d)", hits.n.Load())
	}
	if h.Get("Retry-After") == "" || h.Get("Content-Type") != limit.ProblemJSON || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("denial headers: %v", h)
	}
	if body != `{"type":"about:blank","title":"Too Many Requests","status":429}` {
		t.Fatalf("denial body %q", body)
	}
	// B has its own budget.
	if status, _, _ := do(t, b, "GET", srv.URL+"/ping"); status != http.StatusCreated {
		t.Fatalf("first request from B: %d, want 201", status)
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
	for _, mount := range []string{"root-use", "group", "route", "with", "mount"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			store, _ := newStore(t)
			var seen atomic.Value
			obs := &recorder{}
			l := limit.MustNew(store, limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
				limit.WithObserver(obs))
			var hits counter
			srv := httptest.NewServer(routes(mount, chilimit.Middleware(l), func(w http.ResponseWriter, r *http.Request) {
				seen.Store(r.URL.Path)
				hits.handler(http.StatusOK, "note")(w, r)
			}))
			defer srv.Close()
			c := limittest.ClientFrom("127.0.0.4")
			// ids 1 and 2, GET and HEAD: one bucket of 4.
			reqs := []struct{ method, path string }{{"GET", "/v1/notes/1"}, {"GET", "/v1/notes/2"}, {"HEAD", "/v1/notes/3"}, {"HEAD", "/v1/notes/1"}}
			for _, q := range reqs {
				if status, _, _ := do(t, c, q.method, srv.URL+q.path); status != http.StatusOK {
					t.Fatalf("%s %s: %d, want 200", q.method, q.path, status)
				}
			}
			if status, _, _ := do(t, c, "GET", srv.URL+"/v1/notes/99"); status != http.StatusTooManyRequests {
				t.Fatalf("5th request on the route: %d, want 429 (ids, GET and HEAD share one bucket)", status)
			}
			if got := obs.last(); got != "/v1/notes/{id} 4p60f" {
				t.Fatalf("bucket %q, want the route template bucket", got)
			}
			if hits.n.Load() != 4 {
				t.Fatalf("handler ran %d times, want 4", hits.n.Load())
			}
		})
	}
}

// recorder is an Observer that keeps the last decision's bucket.
type recorder struct{ bucket atomic.Value }

func (r *recorder) Decision(e limit.DecisionEvent)              { r.bucket.Store(e.Bucket) }
func (r *recorder) ClientAddressIssue(string, limit.Issue)      {}
func (r *recorder) StoreError(string, limit.FailureMode)        {}
func (r *recorder) StoreDuration(string, string, time.Duration) {}
func (r *recorder) last() string                                { s, _ := r.bucket.Load().(string); return s }

func TestRetryAfterIsWhenTheClientIsAdmittedAgain(t *testing.T) {
	store, clock := newStore(t)
	l := limit.MustNew(store, limit.Policy{Limit: 2, Window: 10 * time.Second})
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/x", func(w http.ResponseWriter, r *http.Request) {})
	srv := httptest.NewServer(r)
	defer srv.Close()
	c := limittest.ClientFrom("127.0.0.5")
	for i := 0; i < 2; i++ {
		do(t, c, "GET", srv.URL+"/x")
	}
	status, _, h := do(t, c, "GET", srv.URL+"/x")
	if status != http.StatusTooManyRequests {
		t.Fatalf("third request: %d, want 429", status)
	}
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After %q", h.Get("Retry-After"))
	}
	// Retrying while denied changes nothing...
	clock.Advance(time.Duration(secs)*time.Second - time.Second)
	if status, _, _ := do(t, c, "GET", srv.URL+"/x"); status != http.StatusTooManyRequests {
		t.Fatalf("one second before Retry-After: %d, want 429", status)
	}
	// ...and the client is admitted when Retry-After said.
	clock.Advance(time.Second)
	if status, _, _ := do(t, c, "GET", srv.URL+"/x"); status != http.StatusOK {
		t.Fatalf("at Retry-After: %d, want 200", status)
	}
}

func TestAlwaysDisclosureHeadersOnAllowedResponses(t *testing.T) {
	store, _ := newStore(t)
	l := limit.MustNew(store, limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, AlignWindows: true})
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/x", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	status, _, h := do(t, limittest.ClientFrom("127.0.0.6"), "GET", srv.URL+"/x")
	if status != http.StatusAccepted {
		t.Fatalf("status %d, want the handler's 202", status)
	}
	if got, want := h.Get("RateLimit-Policy"), `"10p60";q=10;w=60`; got != want {
		t.Fatalf("RateLimit-Policy %q, want %q", got, want)
	}
	if got := h.Get("RateLimit"); got == "" || got[:10] != `"10p60";r=` {
		t.Fatalf("RateLimit %q", got)
	}
}
