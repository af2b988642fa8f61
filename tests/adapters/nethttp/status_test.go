package httplimit_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// interfaces lists which optional interfaces w has.
func interfaces(w http.ResponseWriter) [3]bool {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	return [3]bool{f, h, p}
}

// A policy that counts only failures: the mount observes the status through
// StatusWriter, which keeps exactly the server's optional interfaces (HTTP/1:
// Flusher and Hijacker; HTTP/2: Flusher and Pusher), so a streaming handler
// still flushes and a WebSocket-style handler still hijacks. Successes
// (written, flushed, or nothing written: 200) are given back; the third
// failure is limited.
func TestCountStatusKeepsOptionalInterfaces(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Hour,
			CountStatus: func(s int) bool { return s >= 400 }})
		mux := http.NewServeMux()
		var outer, inner [3]bool
		mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
			inner = interfaces(w)
			_, _ = w.Write([]byte("a"))
			w.(http.Flusher).Flush()
		})
		mux.HandleFunc("GET /empty", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("GET /fail", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
		mux.HandleFunc("GET /hijack", func(w http.ResponseWriter, r *http.Request) {
			c, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = rw.Flush()
			_ = c.Close()
		})
		limited := httplimit.Middleware(l)(mux)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outer = interfaces(w)
			limited.ServeHTTP(w, r)
		}))
		srv.EnableHTTP2 = h2
		srv.StartTLS()
		c := srv.Client()
		get := func(path string, want int) {
			t.Helper()
			res, err := c.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = bufio.NewReader(res.Body).ReadString(0)
			_ = res.Body.Close()
			if res.StatusCode != want {
				t.Fatalf("h2=%v GET %s: %d, want %d", h2, path, res.StatusCode, want)
			}
		}
		for range 3 {
			get("/stream", 200)
			get("/empty", 200)
		}
		if outer != inner || !inner[0] || inner[1] == h2 || inner[2] != h2 {
			t.Fatalf("h2=%v: the handler saw Flusher/Hijacker/Pusher %v, the server's writer has %v", h2, inner, outer)
		}
		if !h2 {
			for range 3 {
				get("/hijack", 200) // 101 recorded: not a failure
			}
		}
		get("/fail", 500)
		get("/fail", 500)
		get("/stream", 429)
		srv.Close()
	}
}
