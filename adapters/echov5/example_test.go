package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v5"
	echolimit "github.com/quotagate/quotagate/adapters/echov5"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// Limit by API key on one route: the typed key function reads echo's own
// context; requests without a key would fall through to the client address.
func ExampleKeyFunc() {
	apiKey := echolimit.KeyFunc(func(c *echo.Context) (string, error) {
		return c.Request().Header.Get("X-Api-Key"), nil
	})
	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(nil)
	byKey := limittest.MustNew(store, limit.Policy{Limit: 2, Window: time.Minute, KeyFunc: apiKey})

	e := echo.New()
	e.GET("/v1/search", func(c *echo.Context) error { return c.String(http.StatusOK, "results") }, echolimit.Middleware(byKey))
	for _, key := range []string{"k1", "k1", "k1", "k2"} {
		req := httptest.NewRequest("GET", "/v1/search", nil) // every request from one client address
		req.Header.Set("X-Api-Key", key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(key, rec.Code)
	}
	// Output:
	// k1 200
	// k1 200
	// k1 429
	// k2 200
}
