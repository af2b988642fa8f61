package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// A global limit with r.Use, plus per-route limits on a group: every route
// of the group gets its own bucket of 2 per minute.
func Example() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	global := limit.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	perRoute, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow})
	if err != nil {
		panic(err)
	}

	r := gin.New()
	r.Use(ginlimit.Middleware(global))
	v1 := r.Group("/v1", ginlimit.Middleware(perRoute))
	v1.POST("/login", func(c *gin.Context) { c.String(http.StatusOK, "welcome") })

	srv := httptest.NewServer(r)
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
