package ginlimit

import (
	"github.com/gin-gonic/gin"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns gin middleware that decides every request with l.
// Allowed requests continue down the chain with the engine's header fields
// added (none at the default disclosure) and keep the handlers' status and
// body; denied requests get the engine's denial (429 with Retry-After and an
// RFC 9457 body by default) and the chain is aborted (c.Abort), so no later
// handler runs; requests the policy skips continue untouched. The route
// template is c.FullPath(), read only when l.NeedsRoute(). Safe for
// concurrent use; l may be shared by several mounts, which then draw on the
// same buckets.
func Middleware(l *limit.Limiter) gin.HandlerFunc {
	needRoute := l.NeedsRoute()
	return func(c *gin.Context) {
		var route string
		if needRoute {
			route = c.FullPath()
		}
		req := limit.HTTPRequest(c.Request, route)
		req.Native = c
		resp := l.Check(c.Request.Context(), req)
		if resp.Denied() {
			resp.WriteDenial(c.Writer)
			c.Abort()
			return
		}
		resp.WriteHeaders(c.Writer.Header())
	}
}

// KeyFunc adapts a key function over *gin.Context to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user. A blank result or an error falls
// through to the client address; a panic is recovered by the engine. The
// context is valid only during the call: do not keep it.
func KeyFunc(f func(c *gin.Context) (string, error)) limit.KeyFunc {
	return func(req limit.Request) (string, error) {
		c, ok := req.Native.(*gin.Context)
		if !ok {
			return "", nil
		}
		return f(c)
	}
}

// CostFunc adapts a pricing function over *gin.Context to Policy.CostFunc
// (a result <= 0 means the policy's Cost; a panic is recovered by the engine
// and means Cost too).
func CostFunc(f func(c *gin.Context) int64) func(limit.Request) int64 {
	return func(req limit.Request) int64 {
		c, ok := req.Native.(*gin.Context)
		if !ok {
			return 0
		}
		return f(c)
	}
}
