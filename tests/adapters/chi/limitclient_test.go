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
	limitclient "github.com/quotagate/quotagate/client"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/tests/clienttest"
)

// The client transport against this router's middleware, over loopback.
func TestLimitClient(t *testing.T) { clienttest.Run(t, harness{}) }

// countingTransport counts the 429s that cross the wire.
type countingTransport struct {
	base    http.RoundTripper
	limited atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.limited.Add(1)
	}
	return resp, err
}

// The chi example's GET /v1/search as `examples/chi -disclosure always`
// serves it (the global sliding window 100 per 60 s on the root router, the
// route's token bucket 1 per second with a burst of 5, the memory store at
// real time), over a real socket: 12 GETs sent back to back through the
// transport all come back 200, at most one 429 crosses the wire, and the run
// takes 6-9 s (5 at once, then one per second as the bucket refills).
func TestLimitClientPacesTheChiExampleSearch(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	global, err := limit.New(store, limit.Policy{
		Limit: 100, Window: time.Minute, Algorithm: limit.SlidingWindow, Disclosure: limit.DiscloseAlways,
		SkipPaths: []string{"/health", "/metrics"},
	})
	if err != nil {
		t.Fatal(err)
	}
	search, err := global.With(limit.Policy{
		Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5, Cost: 1,
		Disclosure: limit.DiscloseAlways,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(global))
	r.With(chilimit.Middleware(search)).Get("/v1/search", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"results":[]}`)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	wire := &countingTransport{base: srv.Client().Transport}
	client := &http.Client{Transport: limitclient.New(wire), Timeout: 30 * time.Second}
	t0 := time.Now()
	for i := range 12 {
		resp, err := client.Get(srv.URL + "/v1/search")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i+1, resp.StatusCode)
		}
	}
	elapsed := time.Since(t0)
	t.Logf("12 GETs in %v, %d 429s on the wire", elapsed.Round(time.Millisecond), wire.limited.Load())
	if n := wire.limited.Load(); n > 1 {
		t.Errorf("%d 429s crossed the wire, want at most 1", n)
	}
	if elapsed < 6*time.Second || elapsed > 9*time.Second {
		t.Errorf("the run took %v, want 6-9 s", elapsed)
	}
}
