// Command nethttp is the example API served by net/http's ServeMux (Go 1.22+
// patterns) with quotagate (see DESIGN.md, "The example servers"):
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
// Run: go run ./nethttp -addr 127.0.0.1:8080
package main

import (
	"io"
	"net/http"

	httplimit "github.com/quotagate/quotagate/adapters/nethttp"
	"github.com/quotagate/quotagate/examples/internal/app"
)

func main() {
	searchCost := httplimit.CostFunc(func(r *http.Request) int64 {
		if r.URL.Query().Get("expensive") == "1" {
			return 3
		}
		return 1
	})
	app.Main("nethttp", searchCost, func(l *app.Limiters) http.Handler {
		// The global limit around the mux looks each route up in it and
		// sees every request, those no pattern matches (404, 405) included;
		// /health and /metrics are in its SkipPaths. Per-route limits wrap
		// their handlers.
		mux := http.NewServeMux()
		mux.Handle("GET /health", text(app.HealthBody))
		mux.Handle("GET /metrics", l.Metrics)
		if l.Admin != nil { // -admin-token
			mux.Handle("GET "+app.AdminPrefix, l.Admin)
			mux.Handle("DELETE "+app.AdminPrefix, l.Admin)
		}
		mux.HandleFunc("GET /v1/notes/{id}", func(w http.ResponseWriter, r *http.Request) { // HEAD too
			text(app.NoteBody(r.PathValue("id")))(w, r)
		})
		mux.Handle("POST /v1/login", httplimit.Middleware(l.Login)(text(app.LoginBody)))
		mux.Handle("POST /v1/signin", httplimit.Middleware(l.Signin)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(app.SigninStatus(r.Header.Get("X-Password")))
		})))
		mux.Handle("POST /v1/otp", httplimit.Middleware(l.OTP)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(app.OTPStatus(r.Header.Get("X-OTP")))
		})))
		mux.Handle("GET /v1/search", httplimit.Middleware(l.Search)(text(app.SearchBody)))
		mux.Handle("GET /v1/feed", httplimit.Middleware(l.Feed)(text(app.FeedBody)))
		mux.Handle("GET /v1/slow", httplimit.Middleware(l.Slow)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			text(app.Slow(r.Context(), r.URL.Query().Get("ms")))(w, r)
		})))
		mux.Handle("GET /v1/reports", httplimit.Middleware(l.Reports)(text(app.ReportsBody)))
		mux.Handle("GET /v1/export", httplimit.Middleware(l.Export)(text(app.ExportBody)))
		mux.Handle("GET /v1/daily", httplimit.Middleware(l.Daily)(text(app.DailyBody)))
		return httplimit.Middleware(l.Global)(mux)
	})
}

func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}
