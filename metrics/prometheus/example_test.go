package promlimit_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

// A limiter reporting to a caller-owned registry, served on /metrics.
func Example() {
	reg := prometheus.NewRegistry()
	obs, err := promlimit.New(reg)
	if err != nil {
		panic(err)
	}
	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(nil)
	l, err := limit.New(store, limit.Policy{Limit: 2, Window: time.Minute}, limit.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	// The limiter in front of a handler, as an adapter mounts it; the route
	// function names the matched route template (the handler label).
	notes := l.HTTPHandler(http.NotFoundHandler(), func(*http.Request) (string, bool) { return "/v1/notes/{id}", false }, nil)
	for range 3 {
		r := httptest.NewRequest("GET", "/v1/notes/7", nil)
		r.RemoteAddr = "192.0.2.1:4000"
		notes.ServeHTTP(httptest.NewRecorder(), r)
	}

	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // mount on GET /metrics, outside the limiter
	rec := httptest.NewRecorder()
	metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "quotagate_requests_total") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// quotagate_requests_total{bucket="2p60",handler="/v1/notes/{id}",key_source="socket",outcome="allowed",plan=""} 2
	// quotagate_requests_total{bucket="2p60",handler="/v1/notes/{id}",key_source="socket",outcome="degraded",plan=""} 0
	// quotagate_requests_total{bucket="2p60",handler="/v1/notes/{id}",key_source="socket",outcome="limited",plan=""} 1
}
