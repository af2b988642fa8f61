package fiberlimit_test

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiberv3"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// A global limit with app.Use, plus per-route limits in a group: the
// per-route handler goes on each route (in a Use mount fiber has not
// matched the route yet), and each route gets its own bucket of 2 per
// minute.
func Example() {
	app := fiber.New()
	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(nil)
	global := limittest.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	app.Use(fiberlimit.New(global))
	perRoute, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow})
	if err != nil {
		panic(err)
	}
	app.Group("/v1").Post("/login", fiberlimit.New(perRoute), func(c fiber.Ctx) error { return c.SendString("welcome") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	defer app.Shutdown()
	for range 3 {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/login", "text/plain", nil)
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

// Per-route buckets for a whole group: Routes registers every route of the
// group with the limiter in front, where fiber knows the matched route.
// /v1/login and /v1/search each get 1 per minute of their own.
func ExampleRoutes() {
	app := fiber.New()
	perRoute := limittest.MustNew(limittest.NewStore(nil), limit.Policy{Scope: limit.PerRoute, Limit: 1, Window: time.Minute})
	v1 := fiberlimit.Routes(app.Group("/v1"), perRoute)
	ok := func(c fiber.Ctx) error { return c.SendString("ok") }
	v1.Post("/login", ok)
	v1.Get("/search", ok)

	for _, r := range [][2]string{{"POST", "/v1/login"}, {"GET", "/v1/search"}, {"POST", "/v1/login"}} {
		req, err := http.NewRequest(r[0], "http://example.com"+r[1], nil)
		if err != nil {
			panic(err)
		}
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(r[0], r[1], resp.StatusCode)
	}
	// Output:
	// POST /v1/login 200
	// GET /v1/search 200
	// POST /v1/login 429
}
