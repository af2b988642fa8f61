package fiberlimit

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
)

// pattern.matches agrees with fiber's router for every pattern and path
// below: a route without parameters compared as fiber compares it, one
// with parameters through fiber.RoutePatternMatch, and fiber's tree (a path
// shorter than 3 bytes never reaches a route whose leading constant is
// longer: "/a" and "/a/:x?") respected. The truth is an app serving the one
// route.
func TestPatternMatchesAsFibersRouter(t *testing.T) {
	patterns := []string{"/", "/*", "/v1/login", "/v1/login/", "/V1/Login", "/v1/notes/:id", "/v1/notes/:id?",
		"/v1/files/*", "/v1/+", `/v1\:x`, "/a/:x?", "/:id", "/v1/notes/:id<int>", "/v1/:a-:b", "/v1/notes/:id.:ext", "/ab", "/v1/:a?/b", "/v1/+/x", "/r6/:id"}
	paths := []string{"/", "/v1", "/v1/", "/v1/login", "/v1/login/", "/V1/LOGIN", "/v1/notes", "/v1/notes/7", "/v1/notes/x",
		"/v1/notes/7/", "/v1/files", "/v1/files/a/b", "/v1/:x", "/a", "/a/", "/a/b", "/v1/a-b", "/v1/notes/7.json", "/x", "/AB", "/ab/", "/v1/b", "/v1/q/b", "/v1/q/x", "/r63/7", "/r6/7"}
	configs := map[string]fiber.Config{"default": {}, "case-sensitive": {CaseSensitive: true}, "strict-routing": {StrictRouting: true}}
	for name, cfg := range configs {
		for _, pat := range patterns {
			app := fiber.New(cfg)
			app.Get(pat, func(c fiber.Ctx) error { return c.SendStatus(299) })
			h := app.Handler()
			match := fiber.Config{CaseSensitive: cfg.CaseSensitive, StrictRouting: cfg.StrictRouting}
			p := prepare(pat, &match)
			for _, path := range paths {
				var req fasthttp.Request
				req.SetRequestURI(path)
				var fc fasthttp.RequestCtx
				fc.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}, nil)
				h(&fc)
				want := fc.Response.StatusCode() == 299
				if got := p.matches(detection(path, cfg.StrictRouting), &match); got != want {
					t.Errorf("%s: pattern %q, path %q: matches %v, fiber's router %v", name, pat, path, got, want)
				}
			}
		}
	}
}
