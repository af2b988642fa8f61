package fiberlimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiber"
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

func newApp() *fiber.App {
	return fiber.New(fiber.Config{DisableStartupMessage: true})
}

// serve runs app on a real loopback socket until the test ends and returns
// its base URL.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// counter counts handler runs and answers with a fixed status and body.
type counter struct{ n atomic.Int64 }

func (c *counter) handler(status int, body string) fiber.Handler {
	return func(fc *fiber.Ctx) error {
		c.n.Add(1)
		fc.Set("X-Handler", "yes")
		return fc.Status(status).SendString(body)
	}
}

func TestGlobalMountPerPeerBudgets(t *testing.T) {
	for _, disc := range []limit.Disclosure{limit.DiscloseOnLimit, limit.DiscloseNone} {
		t.Run(map[limit.Disclosure]string{limit.DiscloseOnLimit: "on-limit", limit.DiscloseNone: "none"}[disc], func(t *testing.T) {
			p := limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true,
				Disclosure: disc, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}
			l := limit.MustNew(newStore(t), p)
			var hits counter
			app := newApp()
			app.Use(fiberlimit.New(l))
			app.Get("/ping", hits.handler(http.StatusCreated, "pong"))
			url := serve(t, app)

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
		})
	}
}

// The socket peer is the identity, even with fiber's ProxyHeader configured
// (c.IP() would then believe any client's X-Forwarded-For).
func TestForwardingHeadersAreNotTrusted(t *testing.T) {
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 1})
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ProxyHeader: fiber.HeaderXForwardedFor})
	app.Use(fiberlimit.New(l))
	app.Get("/x", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.4")
	for i, xff := range []string{"198.51.100.1", "198.51.100.2"} {
		req, _ := http.NewRequest("GET", url+"/x", nil)
		req.Header.Set("X-Forwarded-For", xff)
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

// routes builds the same API with the limiter at route level in each way
// fiber offers.
func routes(mount string, mw, h fiber.Handler) *fiber.App {
	app := newApp()
	switch mount {
	case "app-route":
		app.Get("/v1/notes/:id", mw, h)
	case "group-route":
		app.Group("/v1").Get("/notes/:id", mw, h)
	case "mounted-app-route":
		sub := fiber.New()
		sub.Get("/notes/:id", mw, h)
		app.Mount("/v1", sub)
	}
	return app
}

func TestPerRouteBucketAtRouteLevel(t *testing.T) {
	for _, mount := range []string{"app-route", "group-route", "mounted-app-route"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			obs := &conformance.Recorder{}
			l := limit.MustNew(newStore(t), limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
				limit.WithObserver(obs))
			var hits counter
			url := serve(t, routes(mount, fiberlimit.New(l), hits.handler(http.StatusOK, "note")))
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
				t.Fatalf("event %+v, want the route template bucket and fiber's spelling as handler", e)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != 0 {
				t.Fatalf("%d route-unknown issues, want 0", n)
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

// In a Use mount fiber has not matched the route yet: PerRoute falls back to
// the Shared bucket, reported as route-unknown on every request.
func TestPerRouteInUseMountFallsBackToShared(t *testing.T) {
	for _, mount := range []string{"app-use", "group-use", "group-arg"} {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			obs := &conformance.Recorder{}
			l := limit.MustNew(newStore(t), limit.Policy{Limit: 3, Scope: limit.PerRoute}, limit.WithObserver(obs))
			mw := fiberlimit.New(l)
			app := newApp()
			h := func(c *fiber.Ctx) error { return c.SendString("ok") }
			switch mount {
			case "app-use":
				app.Use(mw)
				app.Get("/v1/a", h)
				app.Get("/v1/b", h)
			case "group-use":
				g := app.Group("/v1")
				g.Use(mw)
				g.Get("/a", h)
				g.Get("/b", h)
			case "group-arg":
				g := app.Group("/v1", mw)
				g.Get("/a", h)
				g.Get("/b", h)
			}
			url := serve(t, app)
			c := limittest.ClientFrom("127.0.0.7")
			for _, path := range []string{"/v1/a", "/v1/b", "/v1/a"} {
				if r := conformance.Do(t, c, "GET", url+path); r.Status != http.StatusOK {
					t.Fatalf("GET %s: %d, want 200", path, r.Status)
				}
			}
			if r := conformance.Do(t, c, "GET", url+"/v1/b"); r.Status != http.StatusTooManyRequests {
				t.Fatalf("4th request across two routes: %d, want 429 (one Shared bucket)", r.Status)
			}
			if e := obs.Last(); e.Bucket != "3p60" || e.Handler != "" {
				t.Fatalf("event %+v, want the Shared bucket and no handler", e)
			}
			if n := obs.Issues(limit.IssueRouteUnknown); n != 4 {
				t.Fatalf("%d route-unknown issues, want one per request (4)", n)
			}
		})
	}
}

func TestAllowedResponseKeepsHandlerAndError(t *testing.T) {
	p := limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, AlignWindows: true,
		HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}
	app := newApp()
	app.Use(fiberlimit.New(limit.MustNew(newStore(t), p)))
	var hits counter
	app.Get("/x", hits.handler(http.StatusAccepted, "accepted"))
	app.Get("/err", func(c *fiber.Ctx) error { return fiber.NewError(http.StatusTeapot, "short and stout") })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.8")
	r := conformance.Do(t, c, "GET", url+"/x")
	if r.Status != http.StatusAccepted || r.Body != "accepted" || r.Header.Get("X-Handler") != "yes" {
		t.Fatalf("%d %q, want the handler's 202 accepted", r.Status, r.Body)
	}
	conformance.AssertEngineFields(t, r.Header, engineResponse(t, p, 0))
	if r := conformance.Do(t, c, "GET", url+"/err"); r.Status != http.StatusTeapot || r.Body != "short and stout" {
		t.Fatalf("handler error: %d %q, want fiber's 418 from the error handler", r.Status, r.Body)
	}
}

// fasthttp reuses the memory behind c.Method(), c.Path() and header values
// for later requests. A CostFunc (or KeyFunc, or Observer) may keep the
// strings of the Request it is given; they must still read what they read
// when the request was decided. Without the adapter's copies this fails: the
// kept strings change under the test as later requests on the same keep-alive
// connection reuse the buffers.
func TestRequestStringsOutliveTheRequest(t *testing.T) {
	var mu sync.Mutex
	var kept []string
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 1000,
		CostFunc: func(r limit.Request) int64 {
			mu.Lock()
			kept = append(kept, r.Method, r.Path)
			kept = append(kept, r.Header.Values("X-Trace")...)
			mu.Unlock()
			return 1
		}})
	// PURGE is not a standard method, so the adapter cannot swap it for a
	// constant.
	app := fiber.New(fiber.Config{DisableStartupMessage: true, RequestMethods: append(fiber.DefaultMethods[:len(fiber.DefaultMethods):len(fiber.DefaultMethods)], "PURGE")})
	app.Use(fiberlimit.New(l))
	app.All("/*", func(c *fiber.Ctx) error { return c.SendString("ok") })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.9") // one keep-alive connection
	var want []string
	methods := []string{"PURGE", "GET", "PUT", "PURGE"}
	for i := range 12 {
		m := methods[i%len(methods)]
		path := "/p/" + strings.Repeat(string(rune('a'+i)), 8)
		trace := strings.Repeat(string(rune('A'+i)), 16)
		req, _ := http.NewRequest(m, url+path, nil)
		req.Header.Set("X-Trace", trace)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d, want 200", m, path, resp.StatusCode)
		}
		want = append(want, m, path, trace)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(kept, want) {
		t.Fatalf("kept strings changed after their requests:\n got %q\nwant %q", kept, want)
	}
}

// The header view gives every line of a repeated header, in order, whatever
// the case of the name asked for.
func TestHeaderValuesEveryLine(t *testing.T) {
	var got []string
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 10,
		KeyFunc: func(r limit.Request) (string, error) {
			got = r.Header.Values("x-forwarded-for")
			return "", nil
		}})
	app := newApp()
	app.Use(fiberlimit.New(l))
	app.Get("/x", func(c *fiber.Ctx) error { return nil })
	url := serve(t, app)
	req, _ := http.NewRequest("GET", url+"/x", nil)
	req.Header.Add("X-Forwarded-For", "192.0.2.1, 192.0.2.2")
	req.Header.Add("X-Forwarded-For", "192.0.2.3")
	resp, err := limittest.ClientFrom("127.0.0.10").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := []string{"192.0.2.1, 192.0.2.2", "192.0.2.3"}; !slices.Equal(got, want) {
		t.Fatalf("Values = %q, want %q", got, want)
	}
}

// With a trusted X-Forwarded-For (one proxy hop), the engine reads the
// header through the adapter's fasthttp view: several lines are one list, so
// the client is the rightmost member of the last line.
func TestTrustedHeaderAcrossLines(t *testing.T) {
	obs := &conformance.Recorder{}
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 1}, limit.WithTrustedHeader("X-Forwarded-For", 1), limit.WithObserver(obs))
	app := newApp()
	app.Use(fiberlimit.New(l))
	app.Get("/x", func(c *fiber.Ctx) error { return nil })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.12") // the proxy: one peer for every client
	send := func(lines ...string) int {
		req, _ := http.NewRequest("GET", url+"/x", nil)
		for _, v := range lines {
			req.Header.Add("X-Forwarded-For", v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("203.0.113.1, 198.51.100.7", "192.0.2.50"); got != 200 {
		t.Fatalf("client 192.0.2.50: %d, want 200", got)
	}
	if e := obs.Last(); e.KeySource != limit.KeySourceHeader {
		t.Fatalf("key source %s, want header", e.KeySource)
	}
	if got := send("198.51.100.7", "192.0.2.51"); got != 200 {
		t.Fatalf("client 192.0.2.51 behind the same proxy: %d, want 200 (own budget)", got)
	}
	if got := send("203.0.113.9", "192.0.2.50"); got != http.StatusTooManyRequests {
		t.Fatalf("client 192.0.2.50 again (other left members): %d, want 429", got)
	}
}

func TestKeyAndCostFuncsOverCtx(t *testing.T) {
	l := limit.MustNew(newStore(t), limit.Policy{Limit: 3,
		KeyFunc: fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) {
			if k := c.Get("X-Api-Key"); k != "" {
				return k, nil
			}
			return "", errors.New("no key")
		}),
		CostFunc: fiberlimit.CostFunc(func(c *fiber.Ctx) int64 {
			if c.Query("expensive") == "1" {
				return 3
			}
			return 0
		}),
	})
	app := newApp()
	app.Use(fiberlimit.New(l))
	app.Get("/search", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
	url := serve(t, app)
	c := limittest.ClientFrom("127.0.0.11")
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
