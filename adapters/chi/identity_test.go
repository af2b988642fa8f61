package chilimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// issueRecorder records client-address issues and key sources.
type issueRecorder struct {
	mu      sync.Mutex
	issues  []limit.Issue
	sources []limit.KeySource
}

func (r *issueRecorder) Decision(e limit.DecisionEvent) {
	r.mu.Lock()
	r.sources = append(r.sources, e.KeySource)
	r.mu.Unlock()
}

func (r *issueRecorder) ClientAddressIssue(_ string, i limit.Issue) {
	r.mu.Lock()
	r.issues = append(r.issues, i)
	r.mu.Unlock()
}

func (r *issueRecorder) StoreError(string, limit.FailureMode)        {}
func (r *issueRecorder) StoreDuration(string, string, time.Duration) {}

func (r *issueRecorder) count(kind limit.Issue) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, i := range r.issues {
		if i == kind {
			n++
		}
	}
	return n
}

func (r *issueRecorder) keySources() []limit.KeySource {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sources)
}

func notesRouter(l *limit.Limiter) http.Handler {
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/v1/notes/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "note") })
	return r
}

// status sends GET url with optional header lines ("Name: value").
func status(t *testing.T, c *http.Client, url string, header ...[2]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range header {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestFallbackBucketCapOverUnixSocket: chi behind a Unix socket sees no client
// address (r.RemoteAddr is "@"), so every client shares the fallback bucket at
// max(1, Limit/10), each request reported as no-client-address; the same
// limiter over TCP keys a client on its address at the full Limit.
func TestFallbackBucketCapOverUnixSocket(t *testing.T) {
	store, _ := newStore(t)
	obs := &issueRecorder{}
	l := limit.MustNew(store, limit.Policy{Limit: 20, Window: time.Hour}, limit.WithObserver(obs))

	dir, err := os.MkdirTemp("", "qg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen unix: %v", err)
	}
	srv := &http.Server{Handler: notesRouter(l), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	unixClient := func() *http.Client {
		var d net.Dialer
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	a, b := unixClient(), unixClient()

	var got []int
	for _, c := range []*http.Client{a, b, a, b} {
		got = append(got, status(t, c, "http://unix/v1/notes/1"))
	}
	if want := []int{200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses over the Unix socket %v, want %v (fallback cap max(1, 20/10) = 2 for all clients)", got, want)
	}
	if n := obs.count(limit.IssueNoClientAddress); n != 4 {
		t.Fatalf("%d no-client-address events, want 4", n)
	}
	for _, s := range obs.keySources() {
		if s != limit.KeySourceFallback {
			t.Fatalf("KeySource %s, want fallback", s)
		}
	}

	tcp := httptest.NewServer(notesRouter(l))
	defer tcp.Close()
	c := limittest.ClientFrom("127.0.0.2")
	defer c.CloseIdleConnections()
	for i := range 5 {
		if s := status(t, c, tcp.URL+"/v1/notes/1"); s != 200 {
			t.Fatalf("TCP request %d from 127.0.0.2: %d, want 200 (full limit of 20)", i, s)
		}
	}
}

// TestTrustedHeaderAbsentKeysOnPeer: with X-Forwarded-For trusted (1 hop)
// but absent, every request counts trusted-header-missing and is keyed on its
// socket peer, so two clients keep separate allowances; a request with the
// header is keyed on it.
func TestTrustedHeaderAbsentKeysOnPeer(t *testing.T) {
	store, _ := newStore(t)
	obs := &issueRecorder{}
	l := limit.MustNew(store, limit.Policy{Limit: 2, Window: time.Hour}, limit.WithTrustedHeader("X-Forwarded-For", 1), limit.WithObserver(obs))
	srv := httptest.NewServer(notesRouter(l))
	defer srv.Close()
	a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
	defer a.CloseIdleConnections()
	defer b.CloseIdleConnections()
	url := srv.URL + "/v1/notes/1"

	var got []int
	for _, c := range []*http.Client{a, b, a, b, a, b} {
		got = append(got, status(t, c, url))
	}
	if want := []int{200, 200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v: each peer has its own bucket of 2", got, want)
	}
	if n := obs.count(limit.IssueTrustedHeaderMissing); n != 6 {
		t.Fatalf("%d trusted-header-missing events, want 6", n)
	}
	for _, s := range obs.keySources() {
		if s != limit.KeySourceSocket {
			t.Fatalf("KeySource %s, want socket", s)
		}
	}
	if s := status(t, a, url, [2]string{"X-Forwarded-For", "203.0.113.9"}); s != 200 {
		t.Fatalf("request with the trusted header from the exhausted peer: %d, want 200", s)
	}
	if ks := obs.keySources(); ks[len(ks)-1] != limit.KeySourceHeader {
		t.Fatalf("KeySource %s, want header", ks[len(ks)-1])
	}
	if n := obs.count(limit.IssueTrustedHeaderMissing); n != 6 {
		t.Fatalf("the request with the header counted as missing (%d)", n)
	}
}
