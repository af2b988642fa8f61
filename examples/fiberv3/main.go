// Command fiberv3 is the example API served by gofiber/fiber v3 with
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
// Run: go run ./fiberv3 -addr 127.0.0.1:8080
package main

import (
	"context"
	"io"
	"net"
	"os"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiberv3"
	"github.com/quotagate/quotagate/examples/internal/app"
)

func main() {
	c := app.ParseFlags()
	l, err := app.Build(c, fiberlimit.CostFunc(func(c fiber.Ctx) int64 {
		if c.Query("expensive") == "1" {
			return 3
		}
		return 1
	}))
	if err != nil {
		fatal(err)
	}
	a := fiber.New()
	a.Get("/health", text(app.HealthBody))
	a.Get("/metrics", l.Metrics) // fiber v3 serves an http.Handler as a route handler
	// The admin routes, with -admin-token.
	if l.Admin != nil {
		a.Get(app.AdminPrefix+"*", l.Admin)
		a.Delete(app.AdminPrefix+"*", l.Admin)
	}
	// Every limiter sits at route level, where fiber has matched the route:
	// in a Use mount in front of the routes (app.Use, app.Group(prefix,
	// handler)) a PerRoute limit would have to look its route up on every
	// request, and the global (Shared) limit would give the metrics no
	// handler label. Get registers HEAD with the same handlers. The global limit also goes last, as fiberlimit.Unmatched:
	// requests no route matched (404, 405) reach it and count in the global
	// bucket, so scanners are limited too.
	global := fiberlimit.New(l.Global)
	v1 := a.Group("/v1")
	v1.Get("/notes/:id", global, func(c fiber.Ctx) error {
		return text(app.NoteBody(c.Params("id")))(c)
	})
	v1.Post("/login", global, fiberlimit.New(l.Login), text(app.LoginBody))
	v1.Post("/signin", global, fiberlimit.New(l.Signin), func(c fiber.Ctx) error {
		return c.SendStatus(app.SigninStatus(c.Get("X-Password")))
	})
	v1.Post("/otp", global, fiberlimit.New(l.OTP), func(c fiber.Ctx) error {
		return c.SendStatus(app.OTPStatus(c.Get("X-OTP")))
	})
	v1.Get("/search", global, fiberlimit.New(l.Search), text(app.SearchBody))
	v1.Get("/feed", global, fiberlimit.New(l.Feed), text(app.FeedBody))
	v1.Get("/slow", global, fiberlimit.New(l.Slow), func(c fiber.Ctx) error {
		return text(app.Slow(c.Context(), c.Query("ms")))(c)
	})
	v1.Get("/reports", global, fiberlimit.New(l.Reports), text(app.ReportsBody))
	v1.Get("/export", global, fiberlimit.New(l.Export), text(app.ExportBody))
	v1.Get("/daily", global, fiberlimit.New(l.Daily), text(app.DailyBody))
	a.Use(fiberlimit.Unmatched(l.Global))

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		fatal(err)
	}
	err = app.ServeListener("fiberv3", ln, l, func(ctx context.Context, ln net.Listener) error {
		errc := make(chan error, 1)
		go func() { errc <- a.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		return a.ShutdownWithTimeout(5 * time.Second)
	})
	if err != nil {
		fatal(err)
	}
}

func text(body string) fiber.Handler {
	return func(c fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.SendString(body)
	}
}

func fatal(err error) {
	io.WriteString(os.Stderr, "error: "+err.Error()+"\n")
	os.Exit(2)
}
