// Package conformance is quotagate's shared test suite: the same named
// scenarios run through every adapter against every store, over real sockets,
// and any difference is a failure. Third-party stores and adapters can run it
// too.
//
// A store module calls RunStore(t, newStore). An adapter module calls
// RunAdapter(t, harness, newStore) once per store; its Harness only builds
// the router for an App (global mounts, groups, route-level mounts), serves
// it on the listener it is given, and hands out the adapter's typed key and
// cost functions. Scenario inputs and expected outputs are data (see
// scenarios.go), never per-adapter code.
//
// Clients dial from distinct loopback addresses (127.0.0.x) so that each
// simulated client has its own socket peer; one scenario uses a Unix socket
// to present a request with no client address at all.
//
// The package imports only the engine (with its limittest doubles) and the
// standard library.
package conformance

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// Harness builds one adapter's router for an App and serves it.
type Harness interface {
	// Name is the adapter's name in the matrix ("chi", "echo", ...).
	Name() string
	// Serve builds a router for app with the adapter's middleware and serves
	// it on ln (a TCP or Unix listener) until t ends: it must return once the
	// server accepts connections and stop it in t.Cleanup. Global limiters
	// are mounted on the whole router in order; each Group's limiters on a
	// group or subrouter holding its routes; each Route's limiters on that
	// route alone, after the group's. Every route answers with Route.Serve.
	Serve(t testing.TB, ln net.Listener, app *App)
	// KeyFunc returns the adapter's typed key function (its KeyFunc over
	// the framework's own context) whose identity is the value of the
	// request header name ("" when absent).
	KeyFunc(name string) func(limit.Request) (string, error)
	// CostFunc returns the adapter's typed cost function (its CostFunc over
	// the framework's own context) whose cost is the integer value of the
	// query parameter name (0, the policy's Cost, when absent).
	CostFunc(name string) func(limit.Request) int64
	// PlanFunc returns the adapter's typed plan function (its PlanFunc over
	// the framework's own context) whose plan is the value of the request
	// header name ("", the default plan, when absent).
	PlanFunc(name string) func(limit.Request) (string, error)
}

// ServeHandler serves h on ln until t ends: the Serve of harnesses whose
// router is an http.Handler.
func ServeHandler(t testing.TB, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// App is what a scenario asks a harness to serve.
type App struct {
	// Global limiters, mounted on the root router in this order.
	Global []*limit.Limiter
	// Groups of routes sharing a group mount.
	Groups []*Group
	// Routes outside any group (still under Global).
	Routes []*Route
}

// Group is a set of routes under one path prefix with its own mounts
// (chi r.Route/Group, echo and gin groups, fiber app.Group).
type Group struct {
	// Prefix is the group's path prefix ("/v1"); every route path in the
	// group starts with it.
	Prefix string
	// Limiters mounted on the group, in order.
	Limiters []*limit.Limiter
	// Routes of the group, with full paths.
	Routes []*Route
}

// Route is one endpoint.
type Route struct {
	// Method is the HTTP method (GET, POST, HEAD...).
	Method string
	// Path is the full route template in {param} form ("/v1/notes/{id}");
	// harnesses for ":param" routers convert it with ColonPath.
	Path string
	// Limiters mounted on this route alone, in order.
	Limiters []*limit.Limiter
	// Status is the status the handler writes (0: 200).
	Status int
	// Body is the body the handler writes ("" for none).
	Body string
	// Sleep is how long the handler runs before it answers (0: at once).
	Sleep time.Duration

	hits atomic.Int64
}

// HandlerHeader is set by every route handler ("X-Conformance-Handler: ran"),
// so that a scenario can tell whether the handler ran.
const HandlerHeader = "X-Conformance-Handler"

// Serve is the handler's behaviour, for harnesses: it counts the call and
// returns the header to set, the status and the body to write.
func (r *Route) Serve() (header, value string, status int, body string) {
	r.hits.Add(1)
	if r.Sleep > 0 {
		time.Sleep(r.Sleep)
	}
	status = r.Status
	if status == 0 {
		status = http.StatusOK
	}
	return HandlerHeader, "ran", status, r.Body
}

// Hits returns how many times the handler ran.
func (r *Route) Hits() int64 { return r.hits.Load() }

// Relative returns the route's path relative to the group prefix.
func (r *Route) Relative(prefix string) string {
	rel := strings.TrimPrefix(r.Path, prefix)
	if rel == "" {
		return "/"
	}
	return rel
}

// ColonPath converts a {param} template to the ":param" form of echo, gin and
// fiber ("/v1/notes/{id}" -> "/v1/notes/:id").
func ColonPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			segs[i] = ":" + s[1:len(s)-1]
		}
	}
	return strings.Join(segs, "/")
}

// NewStoreFunc returns a fresh, empty store whose decisions are taken at the
// given clock's readings (the Redis store's injected clock, not server TIME),
// so that scenarios can script exact instants. Stores that share a server
// must isolate each call's keys (e.g. a unique key prefix is not available to
// the store, so flush or use a fresh database/namespace per call). A store
// that does I/O should bound its calls generously (a loaded CI machine can
// take well over 100 ms for a round trip, and a timed-out call would fail
// open and turn an exactness check into noise).
type NewStoreFunc func(t testing.TB, clock func() time.Time) limitstore.Store
