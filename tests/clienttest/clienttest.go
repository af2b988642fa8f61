// Package clienttest runs the HTTP client transport (limitclient) against
// quotagate's own middleware on an adapter's router, over loopback: Run
// takes an adapter's conformance harness, so every router is checked with
// the same requests and the same expectations. The store and the client
// share one fake clock whose sleep advances it, so the waits are exact and
// instant.
package clienttest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limitclient "github.com/quotagate/quotagate/client"
	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// wire counts what crosses the wire under the transport.
type wire struct {
	base    http.RoundTripper
	sent    atomic.Int64
	limited atomic.Int64
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.sent.Add(1)
	resp, err := w.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		w.limited.Add(1)
	}
	return resp, err
}

// clock is the shared fake clock; its sleep advances it and sums the waits.
type clock struct {
	*limittest.Clock
	mu    sync.Mutex
	slept map[string]time.Duration // by the request's partition label
}

type labelKey struct{}

func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	label, _ := ctx.Value(labelKey{}).(string)
	c.slept[label] += d
	c.mu.Unlock()
	c.Advance(d)
	return nil
}

func (c *clock) total(label string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept[label]
}

// serve serves app through h on a loopback socket and returns its base URL.
func serve(t *testing.T, h conformance.Harness, app *conformance.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Serve(t, ln, app)
	return "http://" + ln.Addr().String()
}

// newWire returns a wire over a fresh transport whose idle connections are
// closed when t ends, before the server (served earlier, so cleaned up
// later) shuts down: a kept-alive or spare connection would otherwise hold
// a fasthttp server's graceful shutdown until it counts as idle.
func newWire(t *testing.T) *wire {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &wire{base: tr}
}

func setup(t *testing.T) (*clock, *limittest.Store) {
	c := &clock{Clock: limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), slept: map[string]time.Duration{}}
	return c, limittest.NewStore(c.Now)
}

func send(t *testing.T, c *http.Client, url, label string, header ...string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.WithValue(context.Background(), labelKey{}, label), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Run checks the transport against h's router:
//   - token bucket 1/s with a burst of 5, every RateLimit field disclosed
//     (the example servers' GET /v1/search): 12 GETs back to back all get
//     200, at most one 429 crosses the wire, and the waits add up to 6-9 s;
//   - a fixed window of 2 per 60 s with only Retry-After disclosed (the
//     default): the third GET waits the Retry-After and gets 200;
//   - a policy keyed by an API key and a client partitioned by it: one
//     spent key never delays another.
func Run(t *testing.T, h conformance.Harness) {
	t.Run("token_bucket_paced", func(t *testing.T) {
		clk, store := setup(t)
		l, err := limit.New(store, limit.Policy{
			Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5,
			Disclosure: limit.DiscloseAlways,
		})
		if err != nil {
			t.Fatal(err)
		}
		url := serve(t, h, &conformance.App{Routes: []*conformance.Route{
			{Method: "GET", Path: "/v1/search", Limiters: []*limit.Limiter{l}},
		}})
		w := newWire(t)
		c := &http.Client{Transport: limitclient.New(w, limitclient.WithClock(clk.Now, clk.sleep))}
		for i := range 12 {
			if st := send(t, c, url+"/v1/search", ""); st != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200", i+1, st)
			}
		}
		t.Logf("12 requests: %d sent, %d limited on the wire, %v waited", w.sent.Load(), w.limited.Load(), clk.total(""))
		if n := w.limited.Load(); n > 1 {
			t.Errorf("%d 429s crossed the wire, want at most 1", n)
		}
		if d := clk.total(""); d < 6*time.Second || d > 9*time.Second {
			t.Errorf("the run waited %v in all, want 6-9 s", d)
		}
	})
	t.Run("retry_after", func(t *testing.T) {
		clk, store := setup(t)
		l, err := limit.New(store, limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		url := serve(t, h, &conformance.App{Routes: []*conformance.Route{
			{Method: "GET", Path: "/v1/notes", Limiters: []*limit.Limiter{l}},
		}})
		w := newWire(t)
		c := &http.Client{Transport: limitclient.New(w, limitclient.WithClock(clk.Now, clk.sleep), limitclient.WithMaxWait(2*time.Minute))}
		for i := range 3 {
			if st := send(t, c, url+"/v1/notes", ""); st != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200", i+1, st)
			}
		}
		if w.limited.Load() != 1 || w.sent.Load() != 4 {
			t.Errorf("%d sent, %d limited; want 4 and 1", w.sent.Load(), w.limited.Load())
		}
		// The window is aligned to the store's clock at the first request;
		// Retry-After is the rest of the window, rounded up.
		if d := clk.total(""); d <= 0 || d > time.Minute {
			t.Errorf("waited %v, want the rest of the 60 s window", d)
		}
	})
	t.Run("partitions", func(t *testing.T) {
		clk, store := setup(t)
		tight, err := limit.New(store, limit.Policy{
			Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: 10 * time.Second, Burst: 1,
			Disclosure: limit.DiscloseAlways,
		})
		if err != nil {
			t.Fatal(err)
		}
		roomy, err := tight.With(limit.Policy{Scope: limit.PerRoute, Limit: 10000, Window: time.Minute, Disclosure: limit.DiscloseAlways})
		if err != nil {
			t.Fatal(err)
		}
		url := serve(t, h, &conformance.App{Routes: []*conformance.Route{
			{Method: "GET", Path: "/v1/spent", Limiters: []*limit.Limiter{tight}},
			{Method: "GET", Path: "/v1/fresh", Limiters: []*limit.Limiter{roomy}},
		}})
		w := newWire(t)
		c := &http.Client{Transport: limitclient.New(w,
			limitclient.WithClock(clk.Now, clk.sleep),
			limitclient.WithPartition(func(r *http.Request) string { return r.URL.Path }))}
		var wg sync.WaitGroup
		for g := range 8 {
			path := []string{"/v1/spent", "/v1/fresh"}[g%2]
			wg.Go(func() {
				for range 5 {
					if st := send(t, c, url+path, path); st != http.StatusOK && path == "/v1/fresh" {
						t.Errorf("%s: status %d", path, st)
					}
				}
			})
		}
		wg.Wait()
		if d := clk.total("/v1/fresh"); d != 0 {
			t.Errorf("the fresh partition's requests waited %v in all, want 0", d)
		}
		if d := clk.total("/v1/spent"); d == 0 {
			t.Error("the spent partition's requests never waited")
		}
	})
}
