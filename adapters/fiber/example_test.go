package fiberlimit_test

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiber"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// A global limit with app.Use, plus per-route limits in a group: the
// per-route handler goes on each route (in a Use mount fiber does not know
// the matched route yet), and each route gets its own bucket of 2 per minute.
func Example() {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	global := limittest.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	app.Use(fiberlimit.New(global))
	perRoute, err := global.With(limit.Policy{Scope: limit.PerRoute, Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow})
	if err != nil {
		panic(err)
	}
	app.Group("/v1").Post("/login", fiberlimit.New(perRoute), func(c *fiber.Ctx) error { return c.SendString("welcome") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go app.Listener(ln)
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
