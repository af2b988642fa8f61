package echolimit

import (
	"github.com/labstack/echo/v4"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns echo middleware that decides every request with l.
// Allowed requests reach next with the engine's header fields added (none at
// the default disclosure) and keep next's status, body and error; denied
// requests get the engine's denial (429 with Retry-After and an RFC 9457 body
// by default), next is not called and nil is returned; requests the policy
// skips reach next untouched. The route template is c.Path(), read only when
// l.NeedsRoute(). Safe for concurrent use; l may be shared by several mounts,
// which then draw on the same buckets.
func Middleware(l *limit.Limiter) echo.MiddlewareFunc {
	needRoute := l.NeedsRoute()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var route string
			if needRoute {
				route = c.Path()
			}
			r := c.Request()
			req := limit.HTTPRequest(r, route)
			req.Native = c
			resp := l.Check(r.Context(), req)
			if resp.Denied() {
				resp.WriteDenial(c.Response())
				return nil
			}
			resp.WriteHeaders(c.Response().Header())
			return next(c)
		}
	}
}

// KeyFunc adapts a key function over echo.Context to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user. A blank result or an error falls
// through to the client address; a panic is recovered by the engine. The
// context is valid only during the call: do not keep it.
func KeyFunc(f func(c echo.Context) (string, error)) limit.KeyFunc {
	return func(req limit.Request) (string, error) {
		c, ok := req.Native.(echo.Context)
		if !ok {
			return "", nil
		}
		return f(c)
	}
}

// CostFunc adapts a pricing function over echo.Context to Policy.CostFunc
// (a result <= 0 means the policy's Cost; a panic is recovered by the engine
// and means Cost too).
func CostFunc(f func(c echo.Context) int64) func(limit.Request) int64 {
	return func(req limit.Request) int64 {
		c, ok := req.Native.(echo.Context)
		if !ok {
			return 0
		}
		return f(c)
	}
}
