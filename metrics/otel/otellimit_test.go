package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	otellimit "github.com/quotagate/quotagate/metrics/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func newObserver(t testing.TB) (*otellimit.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	obs, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	return obs, reader
}

// points collects reader's data as "name{k=v,...} value" lines, sorted.
func points(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []string
	line := func(name string, set attribute.Set, v string) {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		out = append(out, name+"{"+strings.Join(kv, ",")+"} "+v)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otellimit.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otellimit.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, itoa(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, itoa(p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, "count="+itoa(int64(p.Count)))
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	sort.Strings(out)
	return out
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func equal(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("points:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDecisionsThroughTheEngine(t *testing.T) {
	obs, reader := newObserver(t)
	l, err := limit.New(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Minute}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	h := l.HTTPHandler(http.NotFoundHandler(), func(*http.Request) (string, bool) { return "/v1/notes/{id}", false }, nil)
	for range 3 {
		r := httptest.NewRequest("GET", "/v1/notes/7", nil)
		r.RemoteAddr = "192.0.2.1:4000"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	equal(t, points(t, reader), []string{
		"quotagate.requests{bucket=2p60,handler=/v1/notes/{id},key_source=socket,outcome=allowed,plan=} 2",
		"quotagate.requests{bucket=2p60,handler=/v1/notes/{id},key_source=socket,outcome=degraded,plan=} 0",
		"quotagate.requests{bucket=2p60,handler=/v1/notes/{id},key_source=socket,outcome=limited,plan=} 1",
		"quotagate.store.duration{op=take,store=custom} count=3",
	})
}

func TestStoreErrorsAndIssuesThroughTheEngine(t *testing.T) {
	obs, reader := newObserver(t)
	l, err := limit.New(limittest.FailingStore{}, limit.Policy{Limit: 2, Window: time.Minute}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	h := l.HTTPHandler(http.NotFoundHandler(), nil, nil)
	r := httptest.NewRequest("GET", "/v1/notes/7", nil)
	r.RemoteAddr = "" // no client address: the fallback bucket
	h.ServeHTTP(httptest.NewRecorder(), r)
	got := points(t, reader)
	want := []string{
		"quotagate.issues{bucket=2p60,kind=no-client-address} 1",
		"quotagate.requests{bucket=2p60,handler=,key_source=fallback,outcome=allowed,plan=} 0",
		"quotagate.requests{bucket=2p60,handler=,key_source=fallback,outcome=degraded,plan=} 1",
		"quotagate.requests{bucket=2p60,handler=,key_source=fallback,outcome=limited,plan=} 0",
		"quotagate.store.duration{op=take,store=custom} count=1",
		"quotagate.store.errors{bucket=2p60,failure_mode=open} 1",
	}
	equal(t, got, want)
}

type evictions struct{ expired, live uint64 }

func (e evictions) Evictions() (uint64, uint64) { return e.expired, e.live }

func TestStoreSideEvents(t *testing.T) {
	obs, reader := newObserver(t)
	obs.StoreEvent("redis", "deny-cache")
	obs.StoreEvent("redis", "deny-cache")
	obs.StoreEvent("redis", "breaker-open")
	obs.StoreEvent("redis", "opened")
	obs.StoreEvent("redis", "closed")
	obs.StoreEvent("memory", "closed")
	reg, err := obs.RegisterEvictions("memory", evictions{expired: 7, live: 2})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, points(t, reader), []string{
		"quotagate.store.breaker.opens{store=memory} 0",
		"quotagate.store.breaker.opens{store=redis} 1",
		"quotagate.store.breaker.open{store=memory} 0",
		"quotagate.store.breaker.open{store=redis} 0",
		"quotagate.store.evictions{reason=expired,store=memory} 7",
		"quotagate.store.evictions{reason=live,store=memory} 2",
		"quotagate.store.skipped{reason=breaker-open,store=redis} 1",
		"quotagate.store.skipped{reason=deny-cache,store=redis} 2",
	})
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
}

type evictionPolicy struct {
	policy string
	evicts bool
}

func (e evictionPolicy) EvictionPolicy() (string, bool) { return e.policy, e.evicts }

// The eviction-policy gauge reads 1 for a policy that may evict the
// limiter's keys, 0 for noeviction, with promlimit's policy values
// ("unknown" when not read, "other" outside Redis's names).
func TestEvictionPolicyGauge(t *testing.T) {
	for _, c := range []struct {
		in     evictionPolicy
		policy string
		want   int
	}{
		{evictionPolicy{"allkeys-lru", true}, "allkeys-lru", 1},
		{evictionPolicy{"volatile-ttl", true}, "volatile-ttl", 1},
		{evictionPolicy{"noeviction", false}, "noeviction", 0},
		{evictionPolicy{"", false}, "unknown", 0},
		{evictionPolicy{"made-up", true}, "other", 1},
	} {
		obs, reader := newObserver(t)
		reg, err := obs.RegisterEvictionPolicy("redis", c.in)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range points(t, reader) {
			if strings.HasPrefix(p, "quotagate.store.may_evict") {
				got = append(got, p)
			}
		}
		equal(t, got, []string{fmt.Sprintf("quotagate.store.may_evict{policy=%s,store=redis} %d", c.policy, c.want)})
		if err := reg.Unregister(); err != nil {
			t.Fatal(err)
		}
	}
	obs, _ := newObserver(t)
	if _, err := obs.RegisterEvictionPolicy("redis", nil); err == nil {
		t.Error("RegisterEvictionPolicy(nil) succeeded")
	}
}

// Attribute values are copies: a framework that reuses the buffer behind a
// route string (fiber) cannot change a recorded set afterwards.
func TestAttributeValuesAreCopies(t *testing.T) {
	obs, reader := newObserver(t)
	buf := []byte("/v1/a")
	route := unsafeString(buf)
	obs.Decision(limit.DecisionEvent{Bucket: "b", Handler: route, Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket})
	copy(buf, "/v1/z")
	obs.Decision(limit.DecisionEvent{Bucket: "b", Handler: "/v1/a", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket})
	for _, p := range points(t, reader) {
		if strings.Contains(p, "/v1/z") {
			t.Fatalf("a recorded attribute changed with the caller's buffer: %s", p)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	mp := noop.NewMeterProvider()
	for name, opt := range map[string]otellimit.Option{
		"empty":      otellimit.WithDurationBuckets(),
		"negative":   otellimit.WithDurationBuckets(-1),
		"decreasing": otellimit.WithDurationBuckets(0.1, 0.05),
	} {
		if _, err := otellimit.New(mp, opt); err == nil || !strings.Contains(err.Error(), "WithDurationBuckets") {
			t.Errorf("%s: err %v, want one naming WithDurationBuckets", name, err)
		}
	}
	if _, err := otellimit.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}
