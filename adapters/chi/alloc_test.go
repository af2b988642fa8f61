package chilimit_test

import (
	"net/http"
	"testing"
	"time"

	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

type sink struct{ h http.Header }

func (w *sink) Header() http.Header         { return w.h }
func (w *sink) Write(b []byte) (int, error) { return len(b), nil }
func (w *sink) WriteHeader(int)             {}

// The middleware adds no allocation of its own on the allowed path at the
// default disclosure (the engine + reference store add none either), and at
// most 3 with RateLimit headers on every response.
func TestMiddlewareAllocations(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	for _, tt := range []struct {
		name string
		d    limit.Disclosure
		max  float64
	}{{"default", limit.DiscloseRetryAfter, 0}, {"always", limit.DiscloseAlways, 3}} {
		t.Run(tt.name, func(t *testing.T) {
			l := limit.MustNew(newStore(), limit.Policy{Limit: 1 << 20, Window: time.Hour, Disclosure: tt.d})
			h := chilimit.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequest("GET", "/v1/notes/1", nil)
			r.RemoteAddr = "192.0.2.10:5555"
			w := &sink{h: http.Header{}}
			h.ServeHTTP(w, r)
			got := testing.AllocsPerRun(500, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
			})
			if got > tt.max {
				t.Fatalf("%.1f allocations per allowed request, want at most %.0f", got, tt.max)
			}
		})
	}
}
