package ginlimit

import (
	"github.com/gin-gonic/gin"
	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns gin middleware that decides every request with l
// (limit.Limiter.CheckHTTP, with the route template c.FullPath() and the
// *gin.Context as the native context). Allowed requests continue down the
// chain with the engine's header fields added (none at the default
// disclosure) and keep the handlers' status and body; limited requests get
// the engine's response (429 with Retry-After and an RFC 9457 body by
// default) and the chain is aborted (c.Abort), so no later handler runs;
// requests the policy skips continue untouched. Safe for concurrent use; l
// may be shared by several mounts, which then draw on the same buckets.
//
// After the rest of the chain it settles the request (limit.Limiter.Finish
// with c.Writer.Status()): a request that a later mount limited (a per-route
// mount under a global one) gives this mount's charge back, and a policy
// with CountStatus gives it back when it does not count the status. A
// handler that panics leaves the request counted (and gives its
// Concurrency slots back).
//
// A request no route matches (gin runs the engine-level handlers, r.Use,
// for a 404, and for a 405 when Engine.HandleMethodNotAllowed is set) is
// passed to the engine as unmatched (limit.Request.Unmatched): it counts in
// the Shared bucket.
func Middleware(l *limit.Limiter) gin.HandlerFunc {
	return func(c *gin.Context) {
		// gin routes before any handler runs: an empty FullPath in a handler
		// chain means no route matched (the engine-level handlers of a 404,
		// or of a 405 with HandleMethodNotAllowed).
		p := c.FullPath()
		d := l.CheckHTTP(c.Writer, c.Request, limit.Request{Route: p, Unmatched: p == "", Native: c})
		if !d.Allowed {
			c.Abort()
			return
		}
		defer l.Finish(c.Request.Context(), &d, 0) // a panic: a Concurrency slot is given back, a charge stays
		c.Next()
		l.Finish(c.Request.Context(), &d, c.Writer.Status())
	}
}

// KeyFunc adapts a key function over *gin.Context to Policy.KeyFunc, e.g. to
// limit by API key or authenticated user: limit.KeyFuncOf, which explains
// blank results, errors, panics and a key function mounted under another
// framework. The context is valid only during the call: do not keep it.
func KeyFunc(f func(c *gin.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over *gin.Context to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c *gin.Context) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over the *gin.Context to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(c *gin.Context) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}
