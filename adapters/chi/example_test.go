package chilimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// A global limit on the root router, plus a per-route limit of 2 per minute
// on one route: the per-route bucket is the route pattern chi serves.
func Example() {
	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(nil)
	global := limittest.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	login, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow})
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Use(chilimit.Middleware(global))
	r.With(chilimit.Middleware(login)).Post("/v1/login", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "welcome")
	})
	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/login", nil))
		fmt.Println(rec.Code, rec.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 false
	// 200 false
	// 429 true
}
