package bench

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// A quota no benchmark run can exhaust: every contender measures its allowed
// path, which is what nearly every production request takes.
const (
	quota  = 1 << 28
	window = time.Hour
)

func ok(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }

type contender struct {
	name string
	mw   func() func(http.Handler) http.Handler
}

func quotagate(d limit.Disclosure) func() func(http.Handler) http.Handler {
	return func() func(http.Handler) http.Handler {
		s, err := memstore.New()
		if err != nil {
			panic(err)
		}
		return chilimit.Middleware(limittest.MustNew(s, limit.Policy{Limit: quota, Window: window, Disclosure: d}))
	}
}

// observed is quotagate with the RateLimit fields on every response and an
// Observer, as the chi example runs it (with Prometheus): the engine then
// reads every request's route, which a root mount looks up before chi
// routes it.
func observed() func(http.Handler) http.Handler {
	s, err := memstore.New()
	if err != nil {
		panic(err)
	}
	l := limittest.MustNew(s, limit.Policy{Limit: quota, Window: window, Disclosure: limit.DiscloseAlways},
		limit.WithObserver(discard{}))
	return chilimit.Middleware(l)
}

// discard is an Observer that keeps nothing.
type discard struct{}

func (discard) Decision(limit.DecisionEvent)                {}
func (discard) Issue(string, limit.Issue)                   {}
func (discard) Refund(string, string)                       {}
func (discard) StoreError(string, limit.FailureMode)        {}
func (discard) Wait(string, time.Duration, bool)            {}
func (discard) StoreDuration(string, string, time.Duration) {}
func (discard) StoreEvent(string, string)                   {}

var contenders = []contender{
	// the router alone: what the limiters add is the difference
	{"chi-only", func() func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler { return next }
	}},
	{"quotagate-default", quotagate(limit.DiscloseRetryAfter)},
	{"quotagate-always", quotagate(limit.DiscloseAlways)},
	{"quotagate-always-observed", observed},
	// httprate sends X-RateLimit-* on every response, like our Always level;
	// keyed by the socket peer as LimitByIP did (now deprecated in favour of
	// an explicit LimitBy).
	{"httprate", func() func(http.Handler) http.Handler {
		return httprate.LimitBy(quota, window, func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				host = r.RemoteAddr
			}
			return httprate.CanonicalizeIP(host), nil
		})
	}},
}

func requests(keys int) []*http.Request {
	rs := make([]*http.Request, keys)
	for i := range rs {
		r, err := http.NewRequest("GET", "/v1/notes/1", nil)
		if err != nil {
			panic(err)
		}
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:%d", i>>16&255, i>>8&255, i&255, 1024+i%50000)
		rs[i] = r
	}
	return rs
}

func router(mw func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(mw)
	r.Get("/v1/notes/{id}", ok)
	return r
}

// serveEach serves rs to h in turn, one request per b.Loop iteration,
// through a reused limittest.Sink (so that the harness allocates nothing per
// request and allocs/op belong to router + limiter); a status other than 200
// fails b.
func serveEach(b *testing.B, h http.Handler, rs []*http.Request) {
	w := limittest.NewSink()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clear(w.H)
		h.ServeHTTP(w, rs[i%len(rs)])
		if w.Status != 0 && w.Status != http.StatusOK {
			b.Fatalf("status %d", w.Status)
		}
		i++
	}
}

// BenchmarkChiMiddleware: per request through a chi router, 1 and 100 000
// client addresses, serial and parallel.
func BenchmarkChiMiddleware(b *testing.B) {
	for _, keys := range []int{1, 100_000} {
		rs := requests(keys)
		for _, c := range contenders {
			b.Run(c.name+"/keys="+strconv.Itoa(keys), func(b *testing.B) { serveEach(b, router(c.mw()), rs) })
			b.Run(c.name+"/parallel/keys="+strconv.Itoa(keys), func(b *testing.B) {
				h := router(c.mw())
				var seed atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					w := limittest.NewSink()
					i := int(seed.Add(7919))
					for pb.Next() {
						clear(w.H)
						h.ServeHTTP(w, rs[i%keys])
						i++
					}
				})
			})
		}
	}
}

// BenchmarkMiddlewareOnly: the middleware wrapped straight around the handler,
// no router, so that nothing but the limiter is measured.
func BenchmarkMiddlewareOnly(b *testing.B) {
	for _, keys := range []int{1, 100_000} {
		rs := requests(keys)
		for _, c := range contenders {
			b.Run(c.name+"/keys="+strconv.Itoa(keys), func(b *testing.B) { serveEach(b, c.mw()(http.HandlerFunc(ok)), rs) })
		}
	}
}
