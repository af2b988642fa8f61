// Package breaker_test holds regressions found by trying to break the
// stacked-mount refunds and counting by status over real sockets.
package breaker_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/tests/fibertest"
)

// twoPerHour is a net/http handler behind one httplimit mount of 2
// requests per hour per client address.
func twoPerHour(t *testing.T) http.Handler {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l := limittest.MustNew(store, limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Hour})
	return httplimit.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
}

// dialFrom opens a TCP connection from the loopback address from
// (127.0.0.x) to addr, with a 10 s deadline.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// serve serves srv on a loopback port until t ends and returns its address.
// (net/http needs no more: a Close before Serve makes Serve return at once
// and close ln, unlike fiber's Shutdown: see fibertest.Serve.)
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.ReadHeaderTimeout = 5 * time.Second
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// rawStatus sends one HTTP/1.1 request with the extra header lines from the
// loopback address from (127.0.0.x) to addr and returns the status code.
func rawStatus(t *testing.T, from, addr string, extra ...string) int {
	t.Helper()
	c := dialFrom(t, from, addr)
	defer c.Close()
	req := "GET /x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n"
	for _, h := range extra {
		req += h + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the status line: %v", err)
	}
	var code int
	if _, err := fmt.Sscanf(strings.TrimPrefix(line, "HTTP/1.1 "), "%d", &code); err != nil {
		t.Fatalf("status line %q: %v", line, err)
	}
	return code
}

// A net/http handler served by fasthttp (fiber's adaptor copies every
// header fasthttp accepted into r.Header, and fasthttp capitalises
// "quotagate limited" to the flag's own name): fasthttp up to v1.5x refuses
// a space in a field name (400); later versions accept it, and the forged
// flag, present before the mount charged, refunds nothing: the request
// counts as any other.
func TestForgedLimitedFlagThroughFiberAdaptor(t *testing.T) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.All("/*", adaptor.HTTPHandler(twoPerHour(t)))
	addr := fibertest.Listen(t, app)

	for _, forged := range []string{"quotagate limited: 1", "Quotagate limited: 1"} {
		from := "127.0.0.2"
		if forged[0] == 'Q' {
			from = "127.0.0.3"
		}
		want := []int{204, 204, 429, 429}
		switch got := rawStatus(t, from, addr, forged); got {
		case http.StatusBadRequest:
		case http.StatusNoContent: // served: it counted
			want = []int{204, 429, 429, 429}
		default:
			t.Errorf("%q: %d, want 400 (refused) or 204 (served and counted)", forged, got)
		}
		var got []int
		for range 4 {
			got = append(got, rawStatus(t, from, addr))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after %q from %s: statuses %v, want %v", forged, from, got, want)
		}
	}
}

// Go's own server refuses the flag's field name from a client (400), and
// look-alike names are ordinary fields that refund nothing.
func TestForgedLimitedFlagOverHTTP1(t *testing.T) {
	addr := serve(t, &http.Server{Handler: twoPerHour(t)})

	for _, forged := range []string{"Quotagate limited: 1", "quotagate limited: 1", "Quotagate limited : 1", "Quotagate\tlimited: 1"} {
		if got := rawStatus(t, "127.0.0.2", addr, forged); got != http.StatusBadRequest {
			t.Errorf("%q: %d, want 400", forged, got)
		}
	}
	var got []int
	for _, h := range []string{"Quotagate-Limited: 1", "Quotagate_limited: 1", "X-A: 1\r\n Quotagate limited: 1", "quotagate-limited: 1"} {
		got = append(got, rawStatus(t, "127.0.0.3", addr, h))
	}
	if want := []int{204, 204, 429, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("look-alike fields: statuses %v, want %v", got, want)
	}
}
