// Package fibertest serves fiber apps on real sockets for the tests of the
// tests module (the fiber adapter's conformance harness and the breaker
// regressions), stopped cleanly however early the test ends.
package fibertest

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.uber.org/goleak"
)

// LeakOptions are goleak's options for packages that serve fiber apps:
// fasthttp's goroutines that are not a server's are ignored. Its
// worker-pool cleaner sleeps up to MaxIdleWorkerDuration (10 s) between
// looks at its stop channel (it ends by itself after Shutdown), and one
// date updater per process runs for ever by design.
var LeakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
}

// Serve serves app on ln until t ends, then shuts it down and waits for
// app.Listener to return. It closes ln itself after the shutdown: fasthttp's
// Shutdown closes only the listeners Serve has registered, so a test that
// ends before app.Listener reached Serve (fiber prepares the app first; on a
// loaded machine that takes a while, and a test may end without a request
// to the server) would otherwise leave Serve accepting on ln for ever (a
// leaked goroutine) and a cleanup that waits for it hanging.
func Serve(t testing.TB, ln net.Listener, app *fiber.App) {
	ServeFunc(t, ln, func(ln net.Listener) error { return app.Listener(ln) }, app.ShutdownWithTimeout)
}

// ServeFunc is Serve for an app of another fiber major version (v3, whose
// Listener takes a ListenConfig): listen serves the app on ln until
// shutdown, with a timeout, stops it. The timeout is 10 s: fasthttp v1.69
// (fiber v3's) counts a connection that never sent a request as idle only
// after 5 s, as net/http does, so a spare connection a client dialled holds
// a shutdown for up to 5 s.
func ServeFunc(t testing.TB, ln net.Listener, listen func(net.Listener) error, shutdown func(time.Duration) error) {
	done := make(chan error, 1)
	go func() { done <- listen(ln) }()
	t.Cleanup(func() {
		if err := shutdown(10 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// Listen serves app on a fresh loopback port until t ends (see Serve) and
// returns the port's address ("127.0.0.1:PORT").
func Listen(t testing.TB, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, app)
	return ln.Addr().String()
}
