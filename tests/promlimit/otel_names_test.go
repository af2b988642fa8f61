package promlimit_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	limit "github.com/quotagate/quotagate/engine"
	otellimit "github.com/quotagate/quotagate/metrics/otel"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

type evictionCounts struct{ expired, live uint64 }

func (e evictionCounts) Evictions() (uint64, uint64) { return e.expired, e.live }

type evictionPolicyOf struct {
	policy string
	evicts bool
}

func (e evictionPolicyOf) EvictionPolicy() (string, bool) { return e.policy, e.evicts }

// observer is what promlimit's and otellimit's Observers both implement.
type observer interface {
	limit.Observer
	StoreEvent(store, event string)
	Slots(bucket string, delta int64)
}

// TestPrometheusExporterGivesPromlimitsNames: the same events through
// promlimit, and through otellimit and the OTel Prometheus exporter (its
// default translation), give the same metric names, each with the same
// label names, so that promlimit's dashboard and alerts read either; and
// the same series with the same values (counters, gauges, histogram
// buckets), so that both record the same facts.
func TestPrometheusExporterGivesPromlimitsNames(t *testing.T) {
	preg := prometheus.NewRegistry()
	pobs, err := promlimit.New(preg)
	if err != nil {
		t.Fatal(err)
	}
	preg.MustRegister(promlimit.NewEvictionsCollector("memory", evictionCounts{expired: 3, live: 1}), promlimit.NewEvictionPolicyCollector("redis", evictionPolicyOf{policy: "allkeys-lru", evicts: true}))

	oreg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(oreg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	oobs, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oobs.RegisterEvictions("memory", evictionCounts{expired: 3, live: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := oobs.RegisterEvictionPolicy("redis", evictionPolicyOf{policy: "allkeys-lru", evicts: true}); err != nil {
		t.Fatal(err)
	}

	for _, o := range []observer{pobs, oobs} {
		o.Decision(limit.DecisionEvent{Bucket: "100p60", Outcome: limit.OutcomeAllowed, KeySource: limit.KeySourceSocket})
		o.Decision(limit.DecisionEvent{Bucket: "otp", Outcome: limit.OutcomeLimited, KeySource: limit.KeySourceSocket, Blocked: true})
		o.Refund("100p60", limit.RefundStatus)
		o.Issue("100p60", limit.Issue("route-unknown"))
		o.StoreError("100p60", limit.FailOpen)
		o.StoreDuration("redis", "take", time.Millisecond)
		o.Wait("feed", 20*time.Millisecond, true)
		o.StoreEvent("redis", "opened")
		o.StoreEvent("redis", "deny-cache")
		o.Slots("slow", 1)
	}
	want, got := families(t, preg), families(t, oreg)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("through the OTel Prometheus exporter:\n%s\npromlimit:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	want, got = seriesValues(t, preg), seriesValues(t, oreg)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series through the OTel Prometheus exporter:\n%s\npromlimit:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// families lists reg's metric families as "name{label,...}", sorted.
func families(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		slices.Sort(labels)
		out = append(out, mf.GetName()+"{"+strings.Join(labels, ",")+"}")
	}
	slices.Sort(out)
	return out
}

// seriesValues lists reg's series as "name{label=value,...} value", sorted; a
// histogram's value is its count, its sum and its cumulative buckets.
func seriesValues(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(labels)
			var v string
			switch {
			case m.Counter != nil:
				v = fmt.Sprint(m.GetCounter().GetValue())
			case m.Gauge != nil:
				v = fmt.Sprint(m.GetGauge().GetValue())
			case m.Histogram != nil:
				h := m.GetHistogram()
				v = fmt.Sprintf("count=%d sum=%g", h.GetSampleCount(), h.GetSampleSum())
				for _, b := range h.GetBucket() {
					v += fmt.Sprintf(" le%g=%d", b.GetUpperBound(), b.GetCumulativeCount())
				}
			}
			out = append(out, mf.GetName()+"{"+strings.Join(labels, ",")+"} "+v)
		}
	}
	slices.Sort(out)
	return out
}
