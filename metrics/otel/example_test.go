package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	otellimit "github.com/quotagate/quotagate/metrics/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A limiter reporting to an OTel SDK MeterProvider; a ManualReader stands in
// for the application's exporter (OTLP, Prometheus, stdout).
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otellimit.New(mp)
	if err != nil {
		panic(err)
	}
	// An application passes memstore.New() or a Redis store.
	l, err := limit.New(limittest.NewStore(nil), limit.Policy{Limit: 2, Window: time.Minute}, limit.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	notes := l.HTTPHandler(http.NotFoundHandler(), func(*http.Request) (string, bool) { return "/v1/notes/{id}", false }, nil)
	for range 3 {
		r := httptest.NewRequest("GET", "/v1/notes/7", nil)
		r.RemoteAddr = "192.0.2.1:4000"
		notes.ServeHTTP(httptest.NewRecorder(), r)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != otellimit.Requests {
			continue
		}
		total := map[string]int64{}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := p.Attributes.Value("outcome")
			total[outcome.AsString()] += p.Value
		}
		fmt.Println("allowed", total["allowed"], "limited", total["limited"], "degraded", total["degraded"])
	}
	// Output: allowed 2 limited 1 degraded 0
}
