package fiberlimit

import (
	"github.com/gofiber/fiber/v3"
	limit "github.com/quotagate/quotagate/engine"
)

// Routes returns r with l mounted at route level on every route registered
// through it: the way to give a group of routes per-route buckets, since a
// group mount (app.Group(prefix, New(l)), Group.Use) runs before fiber has
// matched a route and so cannot see it.
//
//	v1 := fiberlimit.Routes(app.Group("/v1"), perRoute)
//	v1.Post("/login", login)  // registered as v1.Post("/login", New(perRoute), login)
//	v1.Get("/search", search) // a bucket of its own
//
// Get, Head, Post, Put, Delete, Connect, Options, Trace, Patch, Add and All
// register the route with New(l)'s handler in front of its handlers; Group,
// Route and RouteChain return routers that do the same for their routes.
// Use and Name are r's own: a Use middleware, static files and a mounted
// app are not limited by it (mount New(l) on them where they need a limit).
func Routes(r fiber.Router, l *limit.Limiter) fiber.Router {
	return &routes{Router: r, h: New(l)}
}

// routes is the Router of Routes: r with the handler h put in front of
// every route's handlers.
type routes struct {
	fiber.Router
	h fiber.Handler
}

// with returns the handlers of a route registered through Routes: h, then
// the route's own (any of the handler types fiber v3 accepts).
func with(h fiber.Handler, handler any, handlers []any) (any, []any) {
	return h, append([]any{handler}, handlers...)
}

func (w *routes) Get(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Get(path, h, hs...)
	return w
}

func (w *routes) Head(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Head(path, h, hs...)
	return w
}

func (w *routes) Post(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Post(path, h, hs...)
	return w
}

func (w *routes) Put(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Put(path, h, hs...)
	return w
}

func (w *routes) Delete(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Delete(path, h, hs...)
	return w
}

func (w *routes) Connect(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Connect(path, h, hs...)
	return w
}

func (w *routes) Options(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Options(path, h, hs...)
	return w
}

func (w *routes) Trace(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Trace(path, h, hs...)
	return w
}

func (w *routes) Patch(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Patch(path, h, hs...)
	return w
}

func (w *routes) Add(methods []string, path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.Add(methods, path, h, hs...)
	return w
}

func (w *routes) All(path string, handler any, handlers ...any) fiber.Router {
	h, hs := with(w.h, handler, handlers)
	w.Router.All(path, h, hs...)
	return w
}

func (w *routes) Group(prefix string, handlers ...any) fiber.Router {
	return &routes{Router: w.Router.Group(prefix, handlers...), h: w.h}
}

func (w *routes) Route(prefix string, fn func(fiber.Router), name ...string) fiber.Router {
	return &routes{Router: w.Router.Route(prefix, func(r fiber.Router) { fn(&routes{Router: r, h: w.h}) }, name...), h: w.h}
}

func (w *routes) RouteChain(path string) fiber.Register {
	return &register{Register: w.Router.RouteChain(path), h: w.h}
}

func (w *routes) Use(args ...any) fiber.Router {
	w.Router.Use(args...)
	return w
}

func (w *routes) Name(name string) fiber.Router {
	w.Router.Name(name)
	return w
}

// register is the Register of a RouteChain through Routes: every route of
// the chain gets h in front of its handlers.
type register struct {
	fiber.Register
	h fiber.Handler
}

func (w *register) All(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.All(h, hs...)
	return w
}

func (w *register) Get(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Get(h, hs...)
	return w
}

func (w *register) Head(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Head(h, hs...)
	return w
}

func (w *register) Post(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Post(h, hs...)
	return w
}

func (w *register) Put(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Put(h, hs...)
	return w
}

func (w *register) Delete(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Delete(h, hs...)
	return w
}

func (w *register) Connect(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Connect(h, hs...)
	return w
}

func (w *register) Options(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Options(h, hs...)
	return w
}

func (w *register) Trace(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Trace(h, hs...)
	return w
}

func (w *register) Patch(handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Patch(h, hs...)
	return w
}

func (w *register) Add(methods []string, handler any, handlers ...any) fiber.Register {
	h, hs := with(w.h, handler, handlers)
	w.Register.Add(methods, h, hs...)
	return w
}

func (w *register) RouteChain(path string) fiber.Register {
	return &register{Register: w.Register.RouteChain(path), h: w.h}
}
