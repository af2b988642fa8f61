package limit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// These tests run the identity chain over real sockets: a plain net/http
// server that calls the engine the way every net/http adapter does, and
// clients that connect from distinct
// loopback addresses or over a Unix socket.

// engineHandler is the smallest adapter: the engine's own net/http handler
// (Peer from r.RemoteAddr, Header from r.Header) around an "ok" handler.
func engineHandler(l *limit.Limiter) http.Handler {
	return l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), nil, nil)
}

// serve runs h on ln until the test ends.
func serve(t *testing.T, ln net.Listener, h http.Handler) {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
}

// clientFrom returns an HTTP client whose connections use dial.
func clientFrom(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: dial}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// get sends GET url with the given header lines and returns the status.
func get(t *testing.T, c *http.Client, url string, header ...string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := headerOf(header...); h != nil {
		req.Header = h
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestSocketFallbackBucketCap: behind a Unix socket the server sees no client
// address at all (r.RemoteAddr is "@" or ""), so every request draws on the
// one shared fallback bucket at Limit/10, reported as no-client-address;
// the same policy over TCP keys each client on its address at the full Limit.
func TestSocketFallbackBucketCap(t *testing.T) {
	t.Parallel()
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 20, Window: time.Hour}, limit.WithObserver(obs))

	dir, err := os.MkdirTemp("", "qg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen unix: %v", err)
	}
	serve(t, uln, engineHandler(l))
	var d net.Dialer
	unix := clientFrom(t, func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) })
	other := clientFrom(t, func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) })

	var got []int
	for _, c := range []*http.Client{unix, other, unix, other} {
		got = append(got, get(t, c, "http://unix/v1/notes/1"))
	}
	if want := []int{200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses over the Unix socket %v, want %v (fallback cap max(1, 20/10) = 2, shared by all clients)", got, want)
	}
	if n := obs.Issues(limit.Issue("no-client-address")); n != 4 {
		t.Fatalf("%d no-client-address events, want 4", n)
	}
	checkKeySources(t, obs, limit.KeySourceFallback)

	// The same limiter over TCP: 127.0.0.2 gets its own bucket at the full 20.
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, tln, engineHandler(l))
	c := limittest.ClientFrom("127.0.0.2")
	t.Cleanup(c.CloseIdleConnections)
	for i := range 5 {
		if s := get(t, c, "http://"+tln.Addr().String()+"/"); s != 200 {
			t.Fatalf("TCP request %d from 127.0.0.2: status %d, want 200", i, s)
		}
	}
	if n := obs.Issues(limit.Issue("no-client-address")); n != 4 {
		t.Fatalf("TCP requests reported no-client-address (%d events)", n)
	}
}

// TestSocketTrustedHeaderAbsentKeysOnPeer: with X-Forwarded-For trusted but
// absent, each request counts trusted-header-missing and is keyed on its
// socket peer, so clients on distinct addresses keep distinct allowances; a
// request carrying the header is keyed on it.
func TestSocketTrustedHeaderAbsentKeysOnPeer(t *testing.T) {
	t.Parallel()
	obs := &limittest.Recorder{}
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Hour}, limit.WithTrustedHeader("X-Forwarded-For", 1), limit.WithObserver(obs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, engineHandler(l))
	url := "http://" + ln.Addr().String() + "/v1/notes/1"
	a, b := limittest.ClientFrom("127.0.0.2"), limittest.ClientFrom("127.0.0.3")
	t.Cleanup(a.CloseIdleConnections)
	t.Cleanup(b.CloseIdleConnections)

	var got []int
	for _, c := range []*http.Client{a, b, a, b, a, b} {
		got = append(got, get(t, c, url))
	}
	if want := []int{200, 200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v: each peer has its own bucket of 2", got, want)
	}
	if n := obs.Issues(limit.Issue("trusted-header-missing")); n != 6 {
		t.Fatalf("%d trusted-header-missing events, want one per request (6)", n)
	}
	checkKeySources(t, obs, limit.KeySourceSocket)

	// 127.0.0.2 is exhausted, but a request from it carrying the trusted
	// header is keyed on the header's address.
	if s := get(t, a, url, "X-Forwarded-For: 203.0.113.9"); s != 200 {
		t.Fatalf("request with the trusted header: status %d, want 200", s)
	}
	if ks := keySources(obs); ks[len(ks)-1] != limit.KeySourceHeader {
		t.Fatalf("KeySource %s, want header", ks[len(ks)-1])
	}
	if n := obs.Issues(limit.Issue("trusted-header-missing")); n != 6 {
		t.Fatalf("the request with the header was reported missing (%d events)", n)
	}
}
