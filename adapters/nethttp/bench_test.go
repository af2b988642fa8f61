package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// newStore returns a memory store, as the benchmarks of main measured.
func newStore(tb testing.TB) *memstore.Store {
	s, err := memstore.New()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkMiddleware measures one allowed request through the middleware
// around a ServeMux (routing included), Shared and PerRoute; "mux-only" is
// the ServeMux alone, for the difference.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("mux-only", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
		r := httptest.NewRequest("GET", "/v1/notes/7", nil)
		w := limittest.NewSink()
		b.ReportAllocs()
		for b.Loop() {
			mux.ServeHTTP(w, r)
		}
	})
	for _, scope := range []limit.Scope{limit.Shared, limit.PerRoute} {
		b.Run(map[limit.Scope]string{limit.Shared: "shared", limit.PerRoute: "per-route"}[scope], func(b *testing.B) {
			store := newStore(b)
			l := limit.MustNew(store, limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute, Scope: scope})
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/notes/{id}", func(http.ResponseWriter, *http.Request) {})
			h := httplimit.Middleware(l)(mux)
			r := httptest.NewRequest("GET", "/v1/notes/7", nil)
			r.RemoteAddr = "192.0.2.1:4711"
			w := limittest.NewSink()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// The middleware adds no allocation of its own on the allowed path at the
// default disclosure: around a handler (route from r.Pattern) it allocates
// nothing; around a ServeMux only the mux's own match slice (as the mux
// alone does).
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	store := newStore(t)
	l := limit.MustNew(store, limit.Policy{Limit: 1 << 20, Window: time.Hour, Scope: limit.PerRoute})
	h := httplimit.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/v1/notes/7", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	r.Pattern = "GET /v1/notes/{id}"
	w := limittest.NewSink()
	h.ServeHTTP(w, r)
	if got := testing.AllocsPerRun(500, func() { h.ServeHTTP(w, r) }); got > 0 {
		t.Fatalf("%.1f allocations per allowed request, want 0", got)
	}
}
