package main

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	limitclient "github.com/quotagate/quotagate/client"
)

// wire counts the requests and the 429s that cross the wire under the
// client transport.
type wire struct {
	base          http.RoundTripper
	sent, limited atomic.Int64
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.sent.Add(1)
	resp, err := w.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		w.limited.Add(1)
	}
	return resp, err
}

// The chi example server started with -disclosure always, and 12 GET
// /v1/search sent back to back through limitclient at real time: the
// route's token bucket (1 per second, burst 5) admits five at once, and
// the transport, told r=0 with the policy's q=1;w=1, waits one second
// before each of the next seven. Every request comes back 200, at most one
// 429 crosses the wire, and the run takes 6-9 s.
func TestClientPacesTheChiExampleSearch(t *testing.T) {
	t.Chdir("..")
	base, _, stop, err := start("chi", "-disclosure", "always")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	w := &wire{base: tr}
	client := &http.Client{Transport: limitclient.New(w), Timeout: 30 * time.Second}
	t0 := time.Now()
	for i := range 12 {
		resp, err := client.Get(base + "/v1/search")
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
	t.Logf("12 GET /v1/search: all 200 in %v; %d sent on the wire, %d of them 429", elapsed.Round(time.Millisecond), w.sent.Load(), w.limited.Load())
	if n := w.limited.Load(); n > 1 {
		t.Errorf("%d 429s crossed the wire, want at most 1", n)
	}
	if elapsed < 6*time.Second || elapsed > 9*time.Second {
		t.Errorf("the run took %v, want 6-9 s", elapsed)
	}
}
