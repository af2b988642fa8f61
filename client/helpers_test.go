package limitclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limitclient "github.com/quotagate/quotagate/client"
)

// fakeClock is a clock whose sleep advances it at once and records the wait.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock {
	// Whole seconds of the real time, so that contexts with deadlines on
	// this clock are not already expired, and epoch seconds are exact.
	return &fakeClock{t: time.Now().Truncate(time.Second)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.slept = append(c.slept, d)
	return nil
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// answer is one scripted response.
type answer struct {
	status int
	header map[string]string
}

// script serves its answers in order (the last one repeats) and counts
// the requests it received.
type script struct {
	mu      sync.Mutex
	answers []answer
	hits    atomic.Int64
	bodies  []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(s.hits.Add(1)) - 1
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	a := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	io.WriteString(w, "body")
}

// serve starts a server for answers and returns it with a client whose
// transport runs on clk.
func serve(t *testing.T, clk *fakeClock, answers []answer, opts ...limitclient.Option) (*script, *httptest.Server, *http.Client) {
	t.Helper()
	s := &script{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	opts = append([]limitclient.Option{
		limitclient.WithClock(clk.Now, clk.Sleep),
		limitclient.WithJitter(func(int64) int64 { return 0 }),
	}, opts...)
	return s, srv, &http.Client{Transport: limitclient.New(srv.Client().Transport, opts...)}
}

func get(t *testing.T, c *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func ok(h map[string]string) answer { return answer{http.StatusOK, h} }
func limited(ra string) answer {
	return answer{http.StatusTooManyRequests, map[string]string{"Retry-After": ra}}
}
func status(code int, h map[string]string) answer { return answer{code, h} }

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
