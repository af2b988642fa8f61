package echolimit

import (
	"github.com/labstack/echo/v4"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns echo middleware that decides every request with l
// (limit.Limiter.CheckHTTP, with the route template c.Path() and the
// echo.Context as the native context). Allowed requests reach next with the
// engine's header fields added (none at the default disclosure) and keep
// next's status, body and error; limited requests get the engine's response
// (429 with Retry-After and an RFC 9457 body by default), next is not called
// and nil is returned; requests the policy skips reach next untouched. Safe
// for concurrent use; l may be shared by several mounts, which then draw on
// the same buckets.
func Middleware(l *limit.Limiter) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !l.CheckHTTP(c.Response(), c.Request(), c.Path(), c).Allowed {
				return nil
			}
			return next(c)
		}
	}
}

// KeyFunc adapts a key function over echo.Context to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user: limit.KeyFuncOf, which explains
// blank results, errors, panics and a key function mounted under another
// framework. The context is valid only during the call: do not keep it.
func KeyFunc(f func(c echo.Context) (string, error)) limit.KeyFunc { return limit.KeyFuncOf(f) }

// CostFunc adapts a pricing function over echo.Context to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c echo.Context) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }
