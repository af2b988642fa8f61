// Command chi is the example API served by a go-chi/chi v5 router with
// quotagate (see DESIGN.md, "The example servers"):
//
//	GET  /health          not limited
//	GET  /metrics         Prometheus metrics (quotagate_*), not limited
//	GET  /v1/notes/{id}   global limit only (HEAD too)
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
// Run: go run ./chi -addr 127.0.0.1:8080
package main

import (
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	"github.com/quotagate/quotagate/examples/internal/app"
)

func main() {
	searchCost := chilimit.CostFunc(func(r *http.Request) int64 {
		if r.URL.Query().Get("expensive") == "1" {
			return 3
		}
		return 1
	})
	app.Main("chi", searchCost, func(l *app.Limiters) http.Handler {
		r := chi.NewRouter()
		// The global limit on the root router sees every request, those no
		// route matches (404, 405) included; /health and /metrics are in its
		// SkipPaths. Per-route limits go inline, on their routes.
		r.Use(chilimit.Middleware(l.Global))
		r.Get("/health", text(app.HealthBody))
		r.Method(http.MethodGet, "/metrics", l.Metrics)
		if l.Admin != nil { // -admin-token
			r.Method(http.MethodGet, app.AdminPrefix+"*", l.Admin)
			r.Method(http.MethodDelete, app.AdminPrefix+"*", l.Admin)
		}
		r.Get("/v1/notes/{id}", func(w http.ResponseWriter, r *http.Request) {
			text(app.NoteBody(chi.URLParam(r, "id")))(w, r)
		})
		r.Head("/v1/notes/{id}", text(""))
		r.With(chilimit.Middleware(l.Login)).Post("/v1/login", text(app.LoginBody))
		r.With(chilimit.Middleware(l.Signin)).Post("/v1/signin", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(app.SigninStatus(r.Header.Get("X-Password")))
		})
		r.With(chilimit.Middleware(l.OTP)).Post("/v1/otp", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(app.OTPStatus(r.Header.Get("X-OTP")))
		})
		r.With(chilimit.Middleware(l.Search)).Get("/v1/search", text(app.SearchBody))
		r.With(chilimit.Middleware(l.Feed)).Get("/v1/feed", text(app.FeedBody))
		r.With(chilimit.Middleware(l.Slow)).Get("/v1/slow", func(w http.ResponseWriter, r *http.Request) {
			text(app.Slow(r.Context(), r.URL.Query().Get("ms")))(w, r)
		})
		r.With(chilimit.Middleware(l.Reports)).Get("/v1/reports", text(app.ReportsBody))
		r.With(chilimit.Middleware(l.Export)).Get("/v1/export", text(app.ExportBody))
		r.With(chilimit.Middleware(l.Daily)).Get("/v1/daily", text(app.DailyBody))
		return r
	})
}

func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}
