package echolimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

// With WithHTTPError a denial reaches the application's HTTPErrorHandler as
// a *LimitedError: here a handler that logs it and answers in the
// application's own format; Retry-After is already on the response.
func ExampleWithHTTPError() {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Limit: 1, Window: time.Minute})
	e := echo.New()
	fallback := echo.DefaultHTTPErrorHandler(false)
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		if errors.Is(err, echolimit.ErrLimited) {
			fmt.Println("limited:", echo.StatusCode(err))
			_ = c.JSON(echo.StatusCode(err), map[string]string{"error": "slow down"})
			return
		}
		fallback(c, err)
	}
	e.Use(echolimit.Middleware(l, echolimit.WithHTTPError()))
	e.GET("/v1/notes/:id", func(c *echo.Context) error { return c.String(http.StatusOK, "note") })
	for range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/notes/7", nil))
		fmt.Println(rec.Code, rec.Header().Get("Retry-After") != "", strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 false note
	// limited: 429
	// 429 true {"error":"slow down"}
}
