package limittest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"
)

// ClientFrom returns an HTTP client whose connections originate from ip, a
// loopback address such as "127.0.0.2" (all of 127.0.0.0/8 is local on
// Linux), so that a server on 127.0.0.1 sees ip as the socket peer. Redirects
// are not followed. Close its idle connections with CloseIdleConnections.
func ClientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16},
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Reply is one HTTP response as a test client saw it.
type Reply struct {
	// Status is the response's status code.
	Status int
	// Body is the whole response body.
	Body string
	// Header is the response's header fields.
	Header http.Header
}

// Do sends one request without a body from c, with the given header lines
// ({name, value} pairs, several lines of one field as separate pairs), and
// reads the whole reply; a transport error fails t.
func Do(t TB, c *http.Client, method, url string, header ...[2]string) Reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	for _, h := range header {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return Reply{Status: resp.StatusCode, Body: string(b), Header: resp.Header}
}

// Serve sends one request without a body (method, target as in
// httptest.NewRequest) to h in process, as from the socket peer peer
// ("192.0.2.30:1234"), and returns what h wrote.
func Serve(h http.Handler, method, target, peer string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = peer
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Sink is an http.ResponseWriter that keeps only the status and reuses its
// header map, so that benchmarks and allocation guards of net/http adapters
// count the router's and the limiter's allocations only. Clear its Header
// between requests when fields would pile up. It is not safe for concurrent
// use.
type Sink struct {
	// H is the header map Header returns.
	H http.Header
	// Status is the last status WriteHeader got (0 before any).
	Status int
}

// NewSink returns an empty Sink.
func NewSink() *Sink { return &Sink{H: http.Header{}} }

// Header implements http.ResponseWriter.
func (s *Sink) Header() http.Header { return s.H }

// Write implements http.ResponseWriter; it discards b.
func (s *Sink) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader implements http.ResponseWriter.
func (s *Sink) WriteHeader(status int) { s.Status = status }
