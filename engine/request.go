package limit

import (
	"net/http"
	"reflect"
)

// Request is the framework-agnostic view of one HTTP request that adapters
// build. Strings must stay valid for the duration of the call (fiber adapters
// copy theirs first); the engine keeps none of them afterwards.
type Request struct {
	// Route is the matched route template in the router's own spelling
	// ("/v1/notes/{id}", "/v1/notes/:id", "GET /v1/notes/{id}"), "" when no
	// route is known. The engine normalises it to "{param}" form for PerRoute
	// buckets (NormalizeRoute) and uses it verbatim as the handler metrics
	// label.
	Route string
	// Unmatched reports that the router has no route for this request: it
	// will answer 404 Not Found or 405 Method Not Allowed (or its own
	// automatic OPTIONS answer). The engine then ignores Route: the request
	// counts in the Shared bucket (a PerRoute policy included, without the
	// route-unknown issue), so that scanners are limited by the mount that
	// sees them, and the handler label is "". Adapters set it only when the
	// router says so; false with Route "" means the route is unknown to the
	// mount (a PerRoute policy then reports Issue "route-unknown").
	Unmatched bool
	// Method is the request method. It never selects a bucket.
	Method string
	// Path is the request path in the form the router routes on (net/http
	// adapters: r.URL.RawPath when the client escaped the path, else
	// r.URL.Path). It never selects a bucket; Policy.SkipPaths compares it.
	Path string
	// Peer is the socket peer, "ip:port", "[ipv6%zone]:port" or a bare
	// address; "" when unknown. Never a forwarding header.
	Peer string
	// Header gives access to request headers; nil means none. The engine
	// reads it only for configured trusted headers.
	Header Header
	// Native is the framework's own request or context (*http.Request,
	// echo.Context, *gin.Context, *fiber.Ctx) for typed key and cost
	// functions (KeyFuncOf, CostFuncOf, PlanFuncOf). In the hooks of Consume and
	// ConsumeN it is the identity passed, a string.
	Native any

	// lim is the Limiter deciding the request, set by the engine before it
	// calls a policy function, so that a typed function can report a Native
	// of the wrong type (Issue "native-mismatch").
	lim *Limiter
}

// Header is read access to request header lines. http.Header implements it.
// Values returns every line of the named header, in order.
type Header interface {
	Values(name string) []string
}

var _ Header = http.Header(nil)

// KeyFuncOf adapts a key function over a framework's native request type T
// (*http.Request, echo.Context, *gin.Context, *fiber.Ctx) to a Policy.KeyFunc; the
// adapters' KeyFunc helpers are this function. A blank result or an error
// falls through to the client address. When Request.Native is not a T (the
// function was written for another framework's adapter) it is not called:
// the identity falls through and Issue "native-mismatch" is reported, logged at
// most once per 10 minutes with both types named.
func KeyFuncOf[T any](f func(T) (string, error)) func(Request) (string, error) {
	return func(r Request) (string, error) {
		v, ok := native[T](&r, "KeyFunc")
		if !ok {
			return "", nil
		}
		return f(v)
	}
}

// CostFuncOf adapts a pricing function over a framework's native request
// type T to Policy.CostFunc; the adapters' CostFunc helpers are this
// function. A result <= 0 means the policy's Cost. When Request.Native is
// not a T the function is not called, the cost is the policy's Cost, and
// Issue "native-mismatch" is reported as for KeyFuncOf.
func CostFuncOf[T any](f func(T) int64) func(Request) int64 {
	return func(r Request) int64 {
		v, ok := native[T](&r, "CostFunc")
		if !ok {
			return 0
		}
		return f(v)
	}
}

// PlanFuncOf adapts a plan function over a framework's native request type
// T to Policy.Plan; the adapters' PlanFunc helpers are this function. When
// Request.Native is not a T the function is not called, the default plan
// applies, and Issue "native-mismatch" is reported as for KeyFuncOf.
func PlanFuncOf[T any](f func(T) (string, error)) func(Request) (string, error) {
	return func(r Request) (string, error) {
		v, ok := native[T](&r, "Plan")
		if !ok {
			return "", nil
		}
		return f(v)
	}
}

// native returns r.Native as a T. When it holds another type, it reports
// the mismatch through the deciding Limiter (if any) and returns false.
func native[T any](r *Request, fn string) (T, bool) {
	v, ok := r.Native.(T)
	if !ok && r.lim != nil {
		r.lim.cfg.rep.nativeMismatch(r.lim.shared.name, fn, reflect.TypeFor[T](), r.Native)
	}
	return v, ok
}
