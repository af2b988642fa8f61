package limit

import "net/http"

// HTTPRequest returns the Request view of r for adapters built on net/http
// (chi, net/http's ServeMux, echo, gin): Method, Path (r.URL.RawPath when the
// client escaped the path, else r.URL.Path: the form chi and echo route on, so
// that SkipPaths never exempts "/%68ealth" while the router serves it with
// another, limited handler; a router that routes on the decoded path then
// simply does not skip such a request), Peer
// (r.RemoteAddr, the socket peer: never a forwarding header), Header
// (r.Header) and Native r, plus the matched route template route ("" when
// unknown). Adapters whose native context is not r (echo.Context,
// *gin.Context) replace Native. It does not allocate and keeps no reference
// to r beyond the returned value.
func HTTPRequest(r *http.Request, route string) Request {
	req := Request{
		Route:  route,
		Method: r.Method,
		Peer:   r.RemoteAddr,
		Header: r.Header,
		Native: r,
	}
	if r.URL != nil {
		req.Path = r.URL.RawPath
		if req.Path == "" {
			req.Path = r.URL.Path
		}
	}
	return req
}

// HTTPHandler returns an http.Handler that decides every request with l
// before next, for adapters whose middleware has the standard
// func(http.Handler) http.Handler shape (chi, net/http's ServeMux). An
// allowed request reaches next with the engine's header fields applied
// (Response.WriteHeaders: none at the default disclosure; several mounts on
// one request merge) and its status and body left to next; a denied request
// gets the engine's denial (Response.WriteDenial) and next is not called; a
// request the policy skips reaches next untouched.
//
// route returns the matched route template of a request ("" when unknown);
// it is called only when l.NeedsRoute(), and a nil route means the route is
// never known. The handler is safe for concurrent use and adds no allocation
// of its own.
func (l *Limiter) HTTPHandler(next http.Handler, route func(*http.Request) string) http.Handler {
	if !l.NeedsRoute() {
		route = nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tmpl string
		if route != nil {
			tmpl = route(r)
		}
		resp := l.Check(r.Context(), HTTPRequest(r, tmpl))
		if resp.Denied() {
			resp.WriteDenial(w)
			return
		}
		resp.WriteHeaders(w.Header())
		next.ServeHTTP(w, r)
	})
}
