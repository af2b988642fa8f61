package ginlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// A global limit whose limited requests get the application's own JSON body
// instead of the RFC 9457 problem; the engine still sends Retry-After.
func Example() {
	slowDown := func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
		return &limit.LimitedResponse{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"error":"slow down"}`)}
	}
	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(nil)
	global := limittest.MustNew(store, limit.Policy{Limit: 1, Window: time.Minute, LimitedResponse: slowDown})

	r := gin.New()
	r.Use(ginlimit.Middleware(global))
	r.GET("/v1/notes/:id", func(c *gin.Context) { c.String(http.StatusOK, "a note") })
	for range 2 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/notes/7", nil))
		fmt.Println(rec.Code, rec.Body.String(), rec.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 a note false
	// 429 {"error":"slow down"} true
}
