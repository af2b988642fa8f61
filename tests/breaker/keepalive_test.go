package breaker_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	fiberlimit "github.com/quotagate/quotagate/adapters/fiber"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/quotagate/quotagate/tests/fibertest"
)

// fiber keeps the "limited" flag in c.Locals, and fasthttp reuses one
// RequestCtx for every request of a keep-alive connection: the flag of a
// limited request must not survive into the next request on the same
// connection (where the global mount would give its charge back: an
// unlimited client). Global 3 per hour, /a 1 per hour, one connection.
func TestFiberLimitedFlagDoesNotOutliveItsRequest(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	global := limittest.MustNew(store, limit.Policy{Name: "global", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour})
	route, err := global.With(limit.Policy{Name: "route", Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberlimit.New(global))
	app.Get("/a", fiberlimit.New(route), func(c *fiber.Ctx) error { return c.SendStatus(http.StatusNoContent) })
	app.Get("/b", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusNoContent) })
	addr := fibertest.Listen(t, app)

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer client.CloseIdleConnections()
	var got []int
	for _, p := range []string{"/a", "/a", "/b", "/b", "/b"} {
		res, err := client.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		got = append(got, res.StatusCode)
	}
	if want := []int{204, 429, 204, 204, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
}
