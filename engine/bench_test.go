package limit_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// benchLimiter returns a limiter over a reference store at a fixed clock
// reading whose quota is far above any b.N unless p sets a Limit.
func benchLimiter(tb testing.TB, p limit.Policy) (*limit.Limiter, *limittest.Store) {
	now := time.UnixMilli(epochMS)
	store := limittest.NewStore(func() time.Time { return now })
	if p.Limit == 0 && p.Quotas == nil {
		p.Limit = 1 << 28
		p.Window = time.Hour
	}
	return mustNew(tb, store, p), store
}

// benchQuotas are four quotas far above any b.N.
var benchQuotas = []limit.Rate{{Limit: 1 << 28, Window: time.Hour}, {Limit: 1 << 29, Window: time.Hour}, {Limit: 1 << 27, Window: 2 * time.Hour}, {Limit: 1 << 24, Window: 24 * time.Hour}}

func BenchmarkCheck(b *testing.B) {
	cases := []struct {
		name string
		p    limit.Policy
		deny bool
	}{
		{"allowed/default-disclosure", limit.Policy{}, false},
		{"allowed/always-ietf", limit.Policy{Disclosure: limit.DiscloseAlways}, false},
		{"allowed/always-all-styles", limit.Policy{Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}, false},
		{"allowed/skip-path-miss", limit.Policy{SkipPaths: []string{"/health", "/metrics"}}, false},
		{"skipped/skip-path-hit", limit.Policy{SkipPaths: []string{"/v1/notes/1"}}, false},
		{"denied/default-disclosure", limit.Policy{Limit: 1}, true},
		{"denied/on-limit-all-styles", limit.Policy{Limit: 1, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}, true},
		{"allowed/4-quotas", limit.Policy{Quotas: benchQuotas}, false},
		{"allowed/4-quotas-always-ietf", limit.Policy{Quotas: benchQuotas, Disclosure: limit.DiscloseAlways}, false},
		{"allowed/plan", limit.Policy{Limit: 1 << 28, Window: time.Hour, Plans: map[string][]limit.Rate{"pro": benchQuotas[:1]},
			Plan: func(limit.Request) (string, error) { return "pro", nil }}, false},
		{"allowed/shadow", limit.Policy{Shadow: true}, false},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			l, _ := benchLimiter(b, tc.p)
			r := req("192.0.2.1:4711", "/v1/notes/1")
			ctx := context.Background()
			w := limittest.Discard // the engine alone, as the adapters' benchmarks add the writing
			l.Check(ctx, r, w)     // create the key (and exhaust a quota of 1)
			b.ReportAllocs()
			for b.Loop() {
				if d := l.Check(ctx, r, w); d.Allowed == tc.deny {
					b.Fatalf("Allowed = %v", d.Allowed)
				}
			}
		})
	}
	b.Run("allowed/default-disclosure/parallel-1024-peers", func(b *testing.B) {
		l, _ := benchLimiter(b, limit.Policy{})
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1)
			ctx := context.Background()
			w := limittest.Discard
			for pb.Next() {
				i++
				peer := peers[i&1023]
				if !l.Check(ctx, limit.Request{Method: "GET", Path: "/v1/notes/1", Peer: peer}, w).Allowed {
					b.Fatal("limited")
				}
			}
		})
	})
}

var peers = func() []string {
	p := make([]string, 1024)
	for i := range p {
		p[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":5000"
	}
	return p
}()

// The allowed path at the default disclosure allocates nothing once the
// key exists. Not parallel: allocation counts are process-wide.
func TestCheckAllowedDefaultDisclosureDoesNotAllocate(t *testing.T) {
	l, _ := benchLimiter(t, limit.Policy{})
	r := req("192.0.2.1:4711", "/v1/notes/1")
	ctx := context.Background()
	w := limittest.NewWriter()
	assertNoAllocs(t, l, func() {
		if d := l.Check(ctx, r, w); !d.Allowed || len(w.Header) != 0 || w.Sends != 0 {
			t.Fatal("limited, or fields at the default disclosure")
		}
	})
}

// BenchmarkCheckIdentity measures a whole allowed decision (in-process test
// store) per identity configuration, short and 1 MB headers included.
func BenchmarkCheckIdentity(b *testing.B) {
	cases := []limit.BenchHeader{
		{Name: "no_trust/spoofed_xff_ignored", Hdr: http.Header{"X-Forwarded-For": {"203.0.113.9"}}},
	}
	cases = append(cases, limit.BenchHeaders()...)
	for _, bc := range cases {
		b.Run(bc.Name, func(b *testing.B) {
			now := time.UnixMilli(epochMS) // a fixed clock: the store costs as little as main's did
			l := limittest.MustNew(limittest.NewStore(func() time.Time { return now }), limit.Policy{Limit: 1 << 30, Window: 1e9}, bc.Opt)
			r := limit.Request{Peer: "10.0.0.2:40001", Header: bc.Hdr}
			ctx := context.Background()
			w := limittest.Discard
			b.ReportAllocs()
			for b.Loop() {
				if !l.Check(ctx, r, w).Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
