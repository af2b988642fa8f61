package fibertest

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, LeakOptions...) }

// TestRegressionServeEndsBeforeListenerServes: a test that ends right after
// starting the server (before app.Listener reached fasthttp's Serve, or
// without any request) leaves no goroutine accepting on the listener, and
// its cleanup does not hang. The hand-rolled start/stop it replaces (go
// app.Listener(ln); t.Cleanup(app.Shutdown)) left Serve accepting for ever.
func TestRegressionServeEndsBeforeListenerServes(t *testing.T) {
	var addr string
	for range 20 {
		t.Run("ends-at-once", func(t *testing.T) {
			addr = Listen(t, fiber.New(fiber.Config{DisableStartupMessage: true}))
		})
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Fatalf("%s still accepts connections after the test ended", addr)
		}
	}
	t.Run("served", func(t *testing.T) {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusNoContent) })
		res, err := http.Get("http://" + Listen(t, app) + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d, want 204", res.StatusCode)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	goleak.VerifyNone(t, LeakOptions...)
}
