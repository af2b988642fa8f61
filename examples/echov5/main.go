// Command echov5 is the example API served by labstack/echo v5 with
// quotagate (see DESIGN.md, "The example servers"):
//
//	GET  /health          not limited
//	GET  /metrics         Prometheus metrics (quotagate_*), not limited
//	GET  /v1/notes/:id    global limit only (HEAD too)
//	POST /v1/login        + fixed window 5/60s (bucket "login")
//	GET  /v1/search       + per-route token bucket 1/s, burst 5; ?expensive=1 costs 3
//	GET  /v1/feed         + token bucket 5/s, burst 1: waits up to 2 s for a slot (MaxWait)
//	GET  /v1/slow?ms=N    + at most 2 in flight per client (Concurrency "slow"): sleeps N ms (at most 5000)
//	GET  /v1/reports      + 2 per 10 s and 5 per 60 s at once, sliding window
//	GET  /v1/export       + per X-API-Key: pro- keys 20/60s, others 5/60s
//	POST /v1/signin       + per-route fixed window: 3 failed attempts/60s (204 with X-Password: open-sesame, else 401)
//	POST /v1/otp          + fixed window "otp": 3 failed attempts/5s, then blocked 8s, a repeat 16s (204 with X-OTP: 123456, else 401; 429 while blocked)
//	GET|DELETE /admin/limits/{identity}  with -admin-token T and Authorization: Bearer T: the Peek (JSON) / Reset (204) of the global, login and otp limiters
//
// Run: go run ./echov5 -addr 127.0.0.1:8080
package main

import (
	"net/http"

	"github.com/labstack/echo/v5"
	echolimit "github.com/quotagate/quotagate/adapters/echov5"
	"github.com/quotagate/quotagate/examples/internal/app"
)

func main() {
	searchCost := echolimit.CostFunc(func(c *echo.Context) int64 {
		if c.QueryParam("expensive") == "1" {
			return 3
		}
		return 1
	})
	app.Main("echov5", searchCost, func(l *app.Limiters) http.Handler {
		e := echo.New()
		// The global limit on e.Use sees every request, those no route
		// matches (404, 405) included; /health and /metrics are in its
		// SkipPaths. Per-route limits go on their routes.
		e.Use(echolimit.Middleware(l.Global))
		e.GET("/health", text(app.HealthBody))
		e.GET("/metrics", echo.WrapHandler(l.Metrics))
		if l.Admin != nil { // -admin-token
			e.GET(app.AdminPrefix+"*", echo.WrapHandler(l.Admin))
			e.DELETE(app.AdminPrefix+"*", echo.WrapHandler(l.Admin))
		}
		e.GET("/v1/notes/:id", func(c *echo.Context) error {
			return text(app.NoteBody(c.Param("id")))(c)
		})
		e.HEAD("/v1/notes/:id", text(""))
		e.POST("/v1/login", text(app.LoginBody), echolimit.Middleware(l.Login))
		e.POST("/v1/signin", func(c *echo.Context) error {
			return c.NoContent(app.SigninStatus(c.Request().Header.Get("X-Password")))
		}, echolimit.Middleware(l.Signin))
		e.POST("/v1/otp", func(c *echo.Context) error {
			return c.NoContent(app.OTPStatus(c.Request().Header.Get("X-OTP")))
		}, echolimit.Middleware(l.OTP))
		e.GET("/v1/search", text(app.SearchBody), echolimit.Middleware(l.Search))
		e.GET("/v1/feed", text(app.FeedBody), echolimit.Middleware(l.Feed))
		e.GET("/v1/slow", func(c *echo.Context) error {
			return text(app.Slow(c.Request().Context(), c.QueryParam("ms")))(c)
		}, echolimit.Middleware(l.Slow))
		e.GET("/v1/reports", text(app.ReportsBody), echolimit.Middleware(l.Reports))
		e.GET("/v1/export", text(app.ExportBody), echolimit.Middleware(l.Export))
		e.GET("/v1/daily", text(app.DailyBody), echolimit.Middleware(l.Daily))
		return e
	})
}

func text(body string) echo.HandlerFunc {
	return func(c *echo.Context) error {
		return c.Blob(http.StatusOK, "application/json", []byte(body))
	}
}
