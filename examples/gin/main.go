// Command gin is the example API served by gin-gonic/gin with quotagate
// (see DESIGN.md, "The example servers"):
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
// Run: go run ./gin -addr 127.0.0.1:8080
package main

import (
	"net/http"

	"github.com/gin-gonic/gin"
	ginlimit "github.com/quotagate/quotagate/adapters/gin"
	"github.com/quotagate/quotagate/examples/internal/app"
)

func main() {
	gin.SetMode(gin.ReleaseMode) // no debug route listing on stdout
	searchCost := ginlimit.CostFunc(func(c *gin.Context) int64 {
		if c.Query("expensive") == "1" {
			return 3
		}
		return 1
	})
	app.Main("gin", searchCost, func(l *app.Limiters) http.Handler {
		r := gin.New()
		// 405 (not gin's default 404) for a path served for other methods,
		// as the other routers answer; gin runs engine-level middleware for
		// both.
		r.HandleMethodNotAllowed = true
		// The global limit on the engine sees every request, those no route
		// matches included; /health and /metrics are in its SkipPaths.
		r.Use(ginlimit.Middleware(l.Global))
		r.GET("/health", text(app.HealthBody))
		r.GET("/metrics", gin.WrapH(l.Metrics))
		if l.Admin != nil { // -admin-token
			r.GET(app.AdminPrefix+"*identity", gin.WrapH(l.Admin))
			r.DELETE(app.AdminPrefix+"*identity", gin.WrapH(l.Admin))
		}
		r.GET("/v1/notes/:id", func(c *gin.Context) { text(app.NoteBody(c.Param("id")))(c) })
		r.HEAD("/v1/notes/:id", text(""))
		r.POST("/v1/login", ginlimit.Middleware(l.Login), text(app.LoginBody))
		r.POST("/v1/signin", ginlimit.Middleware(l.Signin), func(c *gin.Context) {
			c.Status(app.SigninStatus(c.GetHeader("X-Password")))
		})
		r.POST("/v1/otp", ginlimit.Middleware(l.OTP), func(c *gin.Context) {
			c.Status(app.OTPStatus(c.GetHeader("X-OTP")))
		})
		r.GET("/v1/search", ginlimit.Middleware(l.Search), text(app.SearchBody))
		r.GET("/v1/feed", ginlimit.Middleware(l.Feed), text(app.FeedBody))
		r.GET("/v1/slow", ginlimit.Middleware(l.Slow), func(c *gin.Context) {
			text(app.Slow(c.Request.Context(), c.Query("ms")))(c)
		})
		r.GET("/v1/reports", ginlimit.Middleware(l.Reports), text(app.ReportsBody))
		r.GET("/v1/export", ginlimit.Middleware(l.Export), text(app.ExportBody))
		r.GET("/v1/daily", ginlimit.Middleware(l.Daily), text(app.DailyBody))
		return r
	})
}

func text(body string) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Data(http.StatusOK, "application/json", []byte(body))
	}
}
