package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// A global limit on a whole ServeMux, plus per-route limits on a sub-mux:
// every pattern of the sub-mux gets its own bucket of 2 per minute.
func Example() {
	v1 := http.NewServeMux()
	v1.HandleFunc("POST /v1/login", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "welcome") })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})

	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(nil)
	global := limittest.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	perRoute, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow})
	if err != nil {
		panic(err)
	}
	mux.Handle("/v1/", httplimit.Middleware(perRoute)(v1))

	srv := httptest.NewServer(httplimit.Middleware(global)(mux))
	defer srv.Close()
	for range 3 {
		resp, err := http.Post(srv.URL+"/v1/login", "text/plain", nil)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After") != "")
	}
	// Output:
	// 200 false
	// 200 false
	// 429 true
}
