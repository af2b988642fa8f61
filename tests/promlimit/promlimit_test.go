package promlimit_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newMemstore(t testing.TB, clock *limittest.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// histogram returns the sample count and the bucket upper bounds of
// quotagate_store_duration_seconds{store,op} gathered from g.
func histogram(t *testing.T, g prometheus.Gatherer, store, op string) (uint64, []float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != promlimit.StoreDurationSeconds {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m)["store"] == store && labels(m)["op"] == op {
				var upper []float64
				for _, b := range m.GetHistogram().GetBucket() {
					upper = append(upper, b.GetUpperBound())
				}
				return m.GetHistogram().GetSampleCount(), upper
			}
		}
	}
	t.Fatalf("no %s{store=%q,op=%q} series", promlimit.StoreDurationSeconds, store, op)
	return 0, nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestScriptedRunExactSeries drives a real limiter (memstore, fake clock)
// through allowed, limited, fallback, route-unknown and outage requests and
// compares every counter series exactly.
func TestScriptedRunExactSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	obs, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	clock := limittest.NewClock(epoch)
	store := &limittest.FlakyStore{Store: newMemstore(t, clock)}
	global, err := limit.New(store, limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	login, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(l *limit.Limiter, route, peer string, want limit.Outcome) {
		t.Helper()
		d := l.Check(ctx, limit.Request{Route: route, Method: "GET", Path: "/raw/" + peer, Peer: peer}, limittest.NewWriter())
		if d.Outcome != want {
			t.Fatalf("Check(%q, %q): outcome %s, want %s", route, peer, d.Outcome, want)
		}
	}
	const a = "192.0.2.1:40000"
	for range 3 {
		check(global, "/v1/notes/{id}", a, limit.OutcomeAllowed)
	}
	check(global, "/v1/notes/{id}", a, limit.OutcomeLimited)
	check(global, "/v1/notes/{id}", "", limit.OutcomeAllowed) // fallback limit max(1, 3/10) = 1
	check(global, "/v1/notes/{id}", "", limit.OutcomeLimited)
	check(login, "/v1/login", a, limit.OutcomeAllowed)
	check(login, "/v1/login", a, limit.OutcomeAllowed)
	check(login, "/v1/login", a, limit.OutcomeLimited)
	check(login, "", a, limit.OutcomeAllowed) // route-unknown: the shared bucket 2p60f
	store.Fail()
	check(global, "/v1/notes/{id}", a, limit.OutcomeDegraded)
	store.Heal()
	clock.Advance(time.Minute)
	check(global, "/v1/notes/{id}", a, limit.OutcomeAllowed)

	want := `
# HELP quotagate_requests_total Rate-limit decisions by bucket, route template (handler), outcome (allowed, limited, degraded, shadow-limited), identity source (key_source) and plan ("" for an unnamed default plan). An allowed request later refunded is also in quotagate_refunds_total.
# TYPE quotagate_requests_total counter
quotagate_requests_total{bucket="/v1/login 2p60f",handler="/v1/login",key_source="socket",outcome="allowed",plan=""} 2
quotagate_requests_total{bucket="/v1/login 2p60f",handler="/v1/login",key_source="socket",outcome="degraded",plan=""} 0
quotagate_requests_total{bucket="/v1/login 2p60f",handler="/v1/login",key_source="socket",outcome="limited",plan=""} 1
quotagate_requests_total{bucket="2p60f",handler="",key_source="socket",outcome="allowed",plan=""} 1
quotagate_requests_total{bucket="2p60f",handler="",key_source="socket",outcome="degraded",plan=""} 0
quotagate_requests_total{bucket="2p60f",handler="",key_source="socket",outcome="limited",plan=""} 0
quotagate_requests_total{bucket="3p60f",handler="/v1/notes/{id}",key_source="fallback",outcome="allowed",plan=""} 1
quotagate_requests_total{bucket="3p60f",handler="/v1/notes/{id}",key_source="fallback",outcome="degraded",plan=""} 0
quotagate_requests_total{bucket="3p60f",handler="/v1/notes/{id}",key_source="fallback",outcome="limited",plan=""} 1
quotagate_requests_total{bucket="3p60f",handler="/v1/notes/{id}",key_source="socket",outcome="allowed",plan=""} 4
quotagate_requests_total{bucket="3p60f",handler="/v1/notes/{id}",key_source="socket",outcome="degraded",plan=""} 1
quotagate_requests_total{bucket="3p60f",handler="/v1/notes/{id}",key_source="socket",outcome="limited",plan=""} 1
# HELP quotagate_issues_total Requests that met a configuration or input problem (client address, route, plan, a user function that failed), by bucket and kind.
# TYPE quotagate_issues_total counter
quotagate_issues_total{bucket="2p60f",kind="route-unknown"} 1
quotagate_issues_total{bucket="3p60f",kind="no-client-address"} 2
# HELP quotagate_store_errors_total Failed rate-limit store calls (errors, timeouts, panics) by bucket and the failure mode applied.
# TYPE quotagate_store_errors_total counter
quotagate_store_errors_total{bucket="3p60f",failure_mode="open"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		promlimit.RequestsTotal, promlimit.IssuesTotal, promlimit.StoreErrorsTotal); err != nil {
		t.Error(err)
	}
	// The same through the Observer as a Collector.
	if err := testutil.CollectAndCompare(obs, strings.NewReader(want),
		promlimit.RequestsTotal, promlimit.IssuesTotal, promlimit.StoreErrorsTotal); err != nil {
		t.Error(err)
	}
	n, upper := histogram(t, reg, "memory", "take")
	if n != uint64(store.Calls()) || n != 12 {
		t.Errorf("store duration samples: %d, store calls: %d, want 12 each", n, store.Calls())
	}
	if want := promlimit.DefaultDurationBuckets(); len(upper) != len(want) || upper[0] != 0.00005 || upper[len(upper)-1] != 1 {
		t.Errorf("duration buckets %v, want %v", upper, want)
	}
	if got := testutil.CollectAndCount(obs); got != 12+2+1+1 {
		t.Errorf("%d series in all, want 16", got)
	}

	problems, err := testutil.CollectAndLint(obs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("GatherAndLint: %v %v", problems, err)
	}
}

// TestStoreOutage: with the store down, FailOpen requests count as degraded,
// FailClosed ones as limited, FailLocal ones by the local store's answer, and
// quotagate_store_errors_total counts every decision the failure mode made:
// the failed store calls and, once the store's circuit breaker opened (after
// 5 failures in a row), the calls it skipped.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	obs := promlimit.MustNew(nil)
	clock := limittest.NewClock(epoch)
	down := &limittest.FlakyStore{Store: newMemstore(t, clock)} // every call fails
	down.Fail()
	guarded, err := guard.New(down, guard.WithObserver(obs), guard.WithoutDenyCache())
	if err != nil {
		t.Fatal(err)
	}
	local := limittest.MustNew(guarded, limit.Policy{Name: "local", Limit: 2, FailureMode: limit.FailLocal},
		limit.WithObserver(obs), limit.WithLocalStore(newMemstore(t, clock)))
	// Other failure modes come from a New of their own: With keeps
	// WithLocalStore, which only FailLocal policies may use.
	closed, err := limit.New(guarded, limit.Policy{Name: "closed", Limit: 100, FailureMode: limit.FailClosed}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	open, err := limit.New(guarded, limit.Policy{Name: "open", Limit: 100}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := func(i int) limit.Request {
		return limit.Request{Route: "/v1/notes/{id}", Peer: "198.51.100.7:" + strconv.Itoa(1000+i)}
	}
	for i := range 7 {
		if d := open.Check(ctx, req(i), limittest.NewWriter()); !d.Allowed || d.Outcome != limit.OutcomeDegraded {
			t.Fatalf("FailOpen during an outage: %+v", d)
		}
	}
	for i := range 3 {
		if w := limittest.NewWriter(); closed.Check(ctx, req(i), w).Allowed || w.Status != http.StatusServiceUnavailable {
			t.Fatalf("FailClosed during an outage: status %d", w.Status)
		}
	}
	for i := range 3 {
		local.Check(ctx, req(i), limittest.NewWriter()) // local store: 2 admitted (degraded), then limited
	}
	if _, err := open.Consume(ctx, "job-1"); !errors.Is(err, limittest.ErrDown) {
		t.Fatalf("Consume during an outage: error %v, want the store's", err)
	}

	want := `
# HELP quotagate_requests_total Rate-limit decisions by bucket, route template (handler), outcome (allowed, limited, degraded, shadow-limited), identity source (key_source) and plan ("" for an unnamed default plan). An allowed request later refunded is also in quotagate_refunds_total.
# TYPE quotagate_requests_total counter
quotagate_requests_total{bucket="closed",handler="/v1/notes/{id}",key_source="socket",outcome="allowed",plan=""} 0
quotagate_requests_total{bucket="closed",handler="/v1/notes/{id}",key_source="socket",outcome="degraded",plan=""} 0
quotagate_requests_total{bucket="closed",handler="/v1/notes/{id}",key_source="socket",outcome="limited",plan=""} 3
quotagate_requests_total{bucket="local",handler="/v1/notes/{id}",key_source="socket",outcome="allowed",plan=""} 0
quotagate_requests_total{bucket="local",handler="/v1/notes/{id}",key_source="socket",outcome="degraded",plan=""} 2
quotagate_requests_total{bucket="local",handler="/v1/notes/{id}",key_source="socket",outcome="limited",plan=""} 1
quotagate_requests_total{bucket="open",handler="",key_source="consume",outcome="allowed",plan=""} 0
quotagate_requests_total{bucket="open",handler="",key_source="consume",outcome="degraded",plan=""} 1
quotagate_requests_total{bucket="open",handler="",key_source="consume",outcome="limited",plan=""} 0
quotagate_requests_total{bucket="open",handler="/v1/notes/{id}",key_source="socket",outcome="allowed",plan=""} 0
quotagate_requests_total{bucket="open",handler="/v1/notes/{id}",key_source="socket",outcome="degraded",plan=""} 7
quotagate_requests_total{bucket="open",handler="/v1/notes/{id}",key_source="socket",outcome="limited",plan=""} 0
# HELP quotagate_store_errors_total Failed rate-limit store calls (errors, timeouts, panics) by bucket and the failure mode applied.
# TYPE quotagate_store_errors_total counter
quotagate_store_errors_total{bucket="closed",failure_mode="closed"} 3
quotagate_store_errors_total{bucket="local",failure_mode="local"} 3
quotagate_store_errors_total{bucket="open",failure_mode="open"} 8
`
	if err := testutil.CollectAndCompare(obs, strings.NewReader(want), promlimit.RequestsTotal, promlimit.StoreErrorsTotal); err != nil {
		t.Error(err)
	}
	var errs float64
	for _, v := range values(t, obs, promlimit.StoreErrorsTotal) {
		errs += v
	}
	if errs != 14 || down.Failures() != 5 {
		t.Errorf("store errors counted %v, failed store calls %d; want 14 decisions by the failure mode, 5 calls made", errs, down.Failures())
	}
	wantSide := `
# HELP quotagate_store_breaker_open 1 while the store's circuit breaker is open (the store is not called; one probe call every 250 ms), 0 once it closed again.
# TYPE quotagate_store_breaker_open gauge
quotagate_store_breaker_open{store="memory"} 1
# HELP quotagate_store_breaker_opens_total Times the store's circuit breaker opened (the store answered nothing for a whole store timeout, or failed 5 calls in a row).
# TYPE quotagate_store_breaker_opens_total counter
quotagate_store_breaker_opens_total{store="memory"} 1
# HELP quotagate_store_skipped_total Decisions of a store that does I/O that were made without calling it, by store and reason: deny-cache (the local deny cache repeated the store's own denial) or breaker-open (the store's circuit breaker is open; the failure mode decided).
# TYPE quotagate_store_skipped_total counter
quotagate_store_skipped_total{reason="breaker-open",store="memory"} 9
`
	if err := testutil.CollectAndCompare(obs, strings.NewReader(wantSide), promlimit.StoreBreakerOpen, promlimit.StoreBreakerOpensTotal, promlimit.StoreSkippedTotal); err != nil {
		t.Error(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs)
	if n, _ := histogram(t, reg, "memory", "take"); n != 5+3 { // 5 failed calls + 3 local-store calls
		t.Errorf("store duration samples %d, want 8", n)
	}
}

// gather registers c on a fresh pedantic registry (which checks its
// descriptions and series) and returns what the registry gathers; a
// registration or gathering error fails t.
func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// values gathers obs and returns the values of metric's counter series keyed
// by their label values in label-name order, joined with "|".
func values(t *testing.T, obs prometheus.Collector, metric string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range gather(t, obs) {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			out[strings.Join(vals, "|")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestNilRegistererCollectsWithoutRegistering(t *testing.T) {
	t.Parallel()
	obs, err := promlimit.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	obs.Decision(limit.DecisionEvent{Bucket: "b", Handler: "/h", Outcome: limit.OutcomeLimited, KeySource: limit.KeySourceSocket})
	if got := testutil.CollectAndCount(obs, promlimit.RequestsTotal); got != 3 {
		t.Errorf("%d request series, want 3 (limited and its two zero siblings)", got)
	}
	// Nothing was registered anywhere, so a registry accepts the Observer
	// itself, and a New on that registry reuses its collectors.
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(obs); err != nil {
		t.Fatal(err)
	}
	if got, err := testutil.GatherAndCount(reg, promlimit.RequestsTotal); err != nil || got != 3 {
		t.Errorf("gathered %d request series (%v), want 3", got, err)
	}
}

// TestAlreadyRegisteredShares: two Observers on one registry (two limiters in
// one process) count into the same series.
func TestAlreadyRegisteredShares(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	first := promlimit.MustNew(reg)
	second, err := promlimit.New(reg)
	if err != nil {
		t.Fatalf("second New on the same registry: %v", err)
	}
	e := limit.DecisionEvent{Bucket: "100p60", Handler: "/a", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket}
	first.Decision(e)
	second.Decision(e)
	second.Decision(e)
	first.StoreError("100p60", limit.FailOpen)
	second.StoreError("100p60", limit.FailOpen)
	first.StoreDuration("memory", "take", time.Millisecond)
	second.StoreDuration("memory", "take", time.Millisecond)
	want := `
# HELP quotagate_requests_total Rate-limit decisions by bucket, route template (handler), outcome (allowed, limited, degraded, shadow-limited), identity source (key_source) and plan ("" for an unnamed default plan). An allowed request later refunded is also in quotagate_refunds_total.
# TYPE quotagate_requests_total counter
quotagate_requests_total{bucket="100p60",handler="/a",key_source="socket",outcome="allowed",plan=""} 3
quotagate_requests_total{bucket="100p60",handler="/a",key_source="socket",outcome="degraded",plan=""} 0
quotagate_requests_total{bucket="100p60",handler="/a",key_source="socket",outcome="limited",plan=""} 0
# HELP quotagate_store_errors_total Failed rate-limit store calls (errors, timeouts, panics) by bucket and the failure mode applied.
# TYPE quotagate_store_errors_total counter
quotagate_store_errors_total{bucket="100p60",failure_mode="open"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), promlimit.RequestsTotal, promlimit.StoreErrorsTotal); err != nil {
		t.Error(err)
	}
	if n, _ := histogram(t, reg, "memory", "take"); n != 2 {
		t.Errorf("shared histogram has %d samples, want 2", n)
	}
	// A wrapping registerer (a prefix-free label wrap) is unwrapped by the
	// registry, so a third Observer through it shares too.
	if _, err := promlimit.New(prometheus.WrapRegistererWith(nil, reg)); err != nil {
		t.Errorf("New through a wrapping registerer: %v", err)
	}
}

// TestRegistrationConflict: a foreign collector under one of the names is an
// error naming the metric, and New leaves nothing of its own registered.
func TestRegistrationConflict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		foreign prometheus.Collector
	}{
		{"same_desc_other_type", prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: promlimit.StoreDurationSeconds,
			Help: "Duration of rate-limit store calls in seconds, failed calls included, by store and operation.",
		}, []string{"store", "op"})},
		{"other_labels", prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: promlimit.StoreDurationSeconds, Help: "something else",
		}, []string{"backend"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			reg.MustRegister(tt.foreign)
			_, err := promlimit.New(reg)
			if err == nil || !strings.Contains(err.Error(), promlimit.StoreDurationSeconds) {
				t.Fatalf("New with a conflicting %s: error %v, want one naming it", promlimit.StoreDurationSeconds, err)
			}
			// The three metrics New registered before the conflict are gone:
			// registering a collector with the same descriptor succeeds.
			again := prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: promlimit.RequestsTotal,
				Help: "Rate-limit decisions by bucket, route template (handler), outcome (allowed, limited, degraded, shadow-limited), identity source (key_source) and plan (\"\" for an unnamed default plan). An allowed request later refunded is also in quotagate_refunds_total.",
			}, []string{"bucket", "handler", "outcome", "key_source", "plan"})
			if err := reg.Register(again); err != nil {
				t.Errorf("%s still registered after the failed New: %v", promlimit.RequestsTotal, err)
			}
		})
	}
}

func TestDurationBucketsOption(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		b    []float64
	}{
		{"none", nil},
		{"zero", []float64{0, 1}},
		{"negative", []float64{-1}},
		{"nan", []float64{math.NaN()}},
		{"inf", []float64{1, math.Inf(1)}},
		{"not_increasing", []float64{0.1, 0.1}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := promlimit.New(nil, promlimit.WithDurationBuckets(tt.b...))
			if !errors.Is(err, promlimit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithDurationBuckets") {
				t.Errorf("WithDurationBuckets(%v): error %v, want ErrInvalidOption naming the option", tt.b, err)
			}
		})
	}
	t.Run("custom", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewPedanticRegistry()
		obs := promlimit.MustNew(reg, promlimit.WithDurationBuckets(0.001, 0.01))
		obs.StoreDuration("redis", "take", 5*time.Millisecond)
		if n, upper := histogram(t, reg, "redis", "take"); n != 1 || len(upper) != 2 || upper[1] != 0.01 {
			t.Errorf("custom buckets: %d samples, bounds %v", n, upper)
		}
	})
}

// TestUnsafeLabelValues: invalid UTF-8 from a misbehaving adapter never
// panics and is exposed with replacement characters.
func TestUnsafeLabelValues(t *testing.T) {
	t.Parallel()
	obs := promlimit.MustNew(nil)
	obs.Decision(limit.DecisionEvent{Bucket: "b\xff", Handler: "/x\xfe", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket})
	obs.Issue("b\xff", limit.Issue("route-unknown"))
	obs.StoreError("b\xff", limit.FailOpen)
	obs.StoreDuration("s\xff", "take", time.Millisecond)
	if got := testutil.CollectAndCount(obs); got != 3+1+1+1 {
		t.Errorf("%d series, want 6", got)
	}
	if problems, err := testutil.CollectAndLint(obs); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestConcurrentEvents: many goroutines meeting new and seen label sets at
// once lose no event (run with -race).
func TestConcurrentEvents(t *testing.T) {
	t.Parallel()
	obs := promlimit.MustNew(nil)
	const workers, perWorker, handlers = 8, 500, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				h := "/h" + strconv.Itoa((i+w)%handlers)
				obs.Decision(limit.DecisionEvent{Bucket: "b", Handler: h, Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket})
				obs.StoreDuration("memory", "take", time.Microsecond)
			}
		}()
	}
	wg.Wait()
	var total float64
	got := values(t, obs, promlimit.RequestsTotal)
	for h := range handlers {
		total += got["b|/h"+strconv.Itoa(h)+"|socket|allowed|"]
	}
	if total != workers*perWorker {
		t.Errorf("counted %v decisions, want %d", total, workers*perWorker)
	}
}

// TestBeyondCacheBound: label sets past the cache bound are still counted.
func TestBeyondCacheBound(t *testing.T) {
	t.Parallel()
	obs := promlimit.MustNew(nil)
	const n = 5000 // > the 4096 cached label sets
	for range 2 {
		for i := range n {
			obs.Issue("bucket-"+strconv.Itoa(i), limit.Issue("no-client-address"))
		}
	}
	if got := testutil.CollectAndCount(obs, promlimit.IssuesTotal); got != n {
		t.Fatalf("%d series, want %d", got, n)
	}
	got := values(t, obs, promlimit.IssuesTotal)
	for i := range n {
		if v := got["bucket-"+strconv.Itoa(i)+"|no-client-address"]; v != 2 {
			t.Fatalf("bucket-%d: %v, want 2", i, v)
		}
	}
}

func TestHandlerServesQuotagateMetrics(t *testing.T) {
	t.Parallel()
	obs := promlimit.MustNew(nil)
	obs.Decision(limit.DecisionEvent{Bucket: "100p60", Handler: "/v1/notes/{id}", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket})
	srv := httptest.NewServer(obs.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	line := `quotagate_requests_total{bucket="100p60",handler="/v1/notes/{id}",key_source="socket",outcome="allowed",plan=""} 1`
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), line) {
		t.Errorf("GET /metrics: %d\n%s\nwant a line %s", resp.StatusCode, body, line)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text exposition format", ct)
	}
}

// A global limit around a login limit: requests the login limit refuses are
// refunded to the global one. quotagate_requests_total counts them allowed
// there (the decision came first) and quotagate_refunds_total counts the
// refunds, so allowed minus refunded is what the global bucket served; the
// plan label carries the plan that decided, the named default plan too.
func TestRefundsAndPlansInMetrics(t *testing.T) {
	t.Parallel()
	obs := promlimit.MustNew(nil)
	clock := limittest.NewClock(epoch)
	store := newMemstore(t, clock)
	global, err := limit.New(store, limit.Policy{Name: "global", Limit: 100, Window: time.Minute,
		DefaultPlan: "free", Plans: map[string][]limit.Rate{"pro": {{Limit: 1000, Window: time.Minute}}},
		Plan: func(r limit.Request) (string, error) {
			if r.Header != nil && len(r.Header.Values("X-Pro")) > 0 {
				return "pro", nil
			}
			return "free", nil
		}}, limit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	login, err := global.With(limit.Policy{Name: "login", Limit: 27, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	route := func(r *http.Request) (string, bool) { return r.URL.Path, false }
	h := global.HTTPHandler(login.HTTPHandler(ok, route, nil), route, nil)
	served := 0
	for i := range 48 {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		if i%2 == 1 {
			r.Header.Set("X-Pro", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusNoContent {
			served++
		}
	}
	req := values(t, obs, promlimit.RequestsTotal)
	allowed := req["global|/login|socket|allowed|free"] + req["global|/login|socket|allowed|pro"]
	refunds := values(t, obs, promlimit.RefundsTotal)
	if served != 27 || allowed != 48 || refunds["global|later-mount"] != 21 || req["global|/login|socket|allowed|free"] != 24 {
		t.Fatalf("served %d; global allowed %v, refunds %v; want 27 served, 48 allowed (24 free, 24 pro), 21 later-mount refunds",
			served, req, refunds)
	}
}
