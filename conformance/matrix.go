package conformance

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// Row is one store of the adapter x store matrix: its name in the matrix
// and how to make a fresh one.
type Row struct {
	// Store is the store's name in the matrix and in subtest names
	// ("memory", "redis", "redis-cluster").
	Store string
	// New makes a fresh, empty store of this row for each scenario.
	New NewStoreFunc
}

// StoreOf makes a NewStoreFunc of a store constructor that takes a clock,
// e.g. func(c func() time.Time) (*memstore.Store, error) { return
// memstore.New(memstore.WithClock(c)) }; a constructor error fails the test.
func StoreOf[S limitstore.Store](newStore func(clock func() time.Time) (S, error)) NewStoreFunc {
	return func(t testing.TB, clock func() time.Time) limitstore.Store {
		s, err := newStore(clock)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// RunMatrix runs every scenario through h against each store (RunAdapter),
// one subtest per store, named after it.
func RunMatrix(t *testing.T, h Harness, rows ...Row) {
	for _, row := range rows {
		t.Run(row.Store, func(t *testing.T) { RunAdapter(t, h, row.Store, row.New) })
	}
}

// BenchmarkMiddleware measures one allowed request (GET /v1/notes/7 from one
// client, a quota no run exhausts) through an adapter's router built by
// router: without a limiter (the sub-benchmark named only, e.g. "gin-only",
// router(nil)), and with a limiter mounted globally, Shared ("shared") and
// PerRoute ("per-route"), on stores made by newStore at a fake clock.
func BenchmarkMiddleware(b *testing.B, only string, newStore NewStoreFunc, router func(l *limit.Limiter) http.Handler) {
	shared := limit.Policy{Limit: 1 << 40 / 60_000, Window: time.Minute}
	perRoute := shared
	perRoute.Scope = limit.PerRoute
	for _, c := range []struct {
		name string
		p    *limit.Policy
	}{{only, nil}, {"shared", &shared}, {"per-route", &perRoute}} {
		b.Run(c.name, func(b *testing.B) {
			var l *limit.Limiter
			if c.p != nil {
				l = limittest.MustNew(newStore(b, limittest.NewClock(epoch).Now), *c.p, limit.WithKeyPrefix("conformance"))
			}
			h := router(l)
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

// AllocsPerRequest returns the allocations of one allowed request (GET
// /v1/notes/7) through h, warm, as testing.AllocsPerRun counts them. It
// skips t under the race detector, where sync.Pool drops items at random
// (limittest.SkipAllocsUnderRace).
func AllocsPerRequest(t *testing.T, h http.Handler) float64 {
	t.Helper()
	limittest.SkipAllocsUnderRace(t)
	r := httptest.NewRequest("GET", "/v1/notes/7", nil)
	w := limittest.NewSink()
	h.ServeHTTP(w, r)
	return testing.AllocsPerRun(500, func() { h.ServeHTTP(w, r) })
}
