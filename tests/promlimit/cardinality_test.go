package promlimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

// series returns every series obs exposes as "name{label=value,...}",
// sorted, values excluded.
func series(t *testing.T, obs *promlimit.Observer) []string {
	t.Helper()
	var out []string
	for _, mf := range gather(t, obs) {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+strconv.Quote(lp.GetValue()))
			}
			out = append(out, mf.GetName()+"{"+strings.Join(ls, ",")+"}")
		}
	}
	sort.Strings(out)
	return out
}

// notesRouter is a chi router with a root quotagate mount: PerRoute, 1
// request per minute per client, so a client's first request on the route
// is allowed and its second limited.
func notesRouter(t testing.TB) (http.Handler, *promlimit.Observer) {
	t.Helper()
	obs := promlimit.MustNew(nil)
	clock := limittest.NewClock(epoch)
	l, err := limit.New(newMemstore(t, clock), limit.Policy{
		Scope: limit.PerRoute, Limit: 1, Window: time.Minute, Algorithm: limit.FixedWindow,
	}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(chilimit.Middleware(l))
	r.Get("/v1/notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"`+chi.URLParam(r, "id")+`"}`)
	})
	return r, obs
}

// clientIP returns the i-th distinct loopback client address, 127.1.0.1 up.
func clientIP(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

// TestCardinalityThroughChi: 10 000 distinct client addresses sending 20 000
// distinct request paths to one chi route expose exactly the series that one
// client sending two requests to one path does. The requests go through the
// real chi router and chilimit.Middleware via ServeHTTP with RemoteAddr set
// (no socket: 20 000 TCP connections would cost seconds of CPU on a shared
// machine); TestCardinalityOverRealSockets repeats it over loopback sockets
// with fewer clients.
func TestCardinalityThroughChi(t *testing.T) {
	t.Parallel()
	serve := func(h http.Handler, peer, path string) int {
		return limittest.Serve(h, http.MethodGet, path, peer).Code
	}

	one, oneObs := notesRouter(t)
	if a, b := serve(one, "127.1.0.1:5000", "/v1/notes/1"), serve(one, "127.1.0.1:5000", "/v1/notes/1"); a != 200 || b != 429 {
		t.Fatalf("one client: %d then %d, want 200 then 429", a, b)
	}
	want := series(t, oneObs)

	many, manyObs := notesRouter(t)
	const clients = 10_000
	for i := range clients {
		peer := clientIP(i) + ":" + strconv.Itoa(1024+i%50000)
		first := serve(many, peer, "/v1/notes/"+strconv.Itoa(2*i))
		second := serve(many, peer, "/v1/notes/"+strconv.Itoa(2*i+1))
		if first != 200 || second != 429 {
			t.Fatalf("client %d: %d then %d, want 200 then 429", i, first, second)
		}
	}
	got := series(t, manyObs)
	if !slices.Equal(got, want) {
		t.Errorf("10 000 clients x 20 000 paths expose %d series:\n  %s\none client on one path exposes %d:\n  %s",
			len(got), strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
	if len(want) != 4 { // requests x 3 outcomes + one store-duration histogram
		t.Errorf("%d series, want 4:\n  %s", len(want), strings.Join(want, "\n  "))
	}
	for _, s := range got {
		if strings.Contains(s, "127.1.") || strings.Contains(s, "/v1/notes/1") {
			t.Errorf("series %s carries a client address or a raw path", s)
		}
	}
}

// TestCardinalityOverRealSockets: the same over loopback TCP, each client
// dialling from its own address (limittest.ClientFrom), so the peer comes
// from the socket as in production. 500 clients, 1 000 paths.
func TestCardinalityOverRealSockets(t *testing.T) {
	t.Parallel()
	run := func(clients int) []string {
		h, obs := notesRouter(t)
		srv := httptest.NewServer(h)
		defer srv.Close()
		for i := range clients {
			c := limittest.ClientFrom(clientIP(i))
			for j, want := range []int{200, 429} {
				path := "/v1/notes/" + strconv.Itoa(2*i+j)
				if clients == 1 {
					path = "/v1/notes/1"
				}
				resp, err := c.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("client %s request %d: %d, want %d", clientIP(i), j, resp.StatusCode, want)
				}
			}
			c.CloseIdleConnections()
		}
		return series(t, obs)
	}
	want, got := run(1), run(500)
	if !slices.Equal(got, want) || len(want) != 4 {
		t.Errorf("500 clients expose:\n  %s\none client exposes:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
