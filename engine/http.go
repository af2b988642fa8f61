package limit

import "net/http"

// This file is the engine's net/http side: the Request view of an
// *http.Request and the ResponseWriter implementation for an
// http.ResponseWriter, which the adapters built on net/http (chi, net/http's
// ServeMux, echo, gin) use instead of writing their own.

// CheckHTTP is Check for frameworks built on net/http: it decides r, writes
// the engine's header fields into w (none at the default disclosure on an
// allowed request; several mounts on one request merge), and when the
// request is limited writes the whole response (status, Content-Length and
// body). The adapter calls its next handler when the Decision is Allowed and
// stops its chain otherwise.
//
// route is the matched route template ("" when unknown); native is the
// framework's own context for typed key and cost functions (nil: r itself).
// The Request view has Path r.URL.RawPath when the client escaped the path,
// else r.URL.Path (the form chi and echo route on, so that SkipPaths never
// exempts "/%68ealth" while the router serves it with another, limited
// handler), Peer r.RemoteAddr (the socket peer: never a forwarding header)
// and Header r.Header. It is safe for concurrent use and allocates nothing
// on an allowed request at the default disclosure.
func (l *Limiter) CheckHTTP(w http.ResponseWriter, r *http.Request, route string, native any) Decision {
	req := Request{Route: route, Method: r.Method, Peer: r.RemoteAddr, Header: r.Header, Native: native}
	if native == nil {
		req.Native = r
	}
	if r.URL != nil {
		req.Path = r.URL.RawPath
		if req.Path == "" {
			req.Path = r.URL.Path
		}
	}
	var resp response
	l.check(r.Context(), &req, &resp)
	resp.writeHTTP(w)
	return resp.Decision
}

// HTTPHandler returns an http.Handler that decides every request with l
// (CheckHTTP) before next, for adapters whose middleware has the standard
// func(http.Handler) http.Handler shape (chi, net/http's ServeMux): an
// allowed request reaches next with the engine's header fields applied and
// its status and body left to next; a limited request gets the engine's
// response and next is not called; a request the policy skips reaches next
// untouched.
//
// route returns the matched route template of a request ("" when unknown);
// the handler calls it only when something reads the route (a PerRoute
// bucket, the handler label of an Observer, a policy function that receives
// the Request), and a nil route means the route is never known. The handler
// is safe for concurrent use and adds no allocation of its own.
func (l *Limiter) HTTPHandler(next http.Handler, route func(*http.Request) string) http.Handler {
	if !l.needsRoute {
		route = nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tmpl string
		if route != nil {
			tmpl = route(r)
		}
		if l.CheckHTTP(w, r, tmpl, nil).Allowed {
			next.ServeHTTP(w, r)
		}
	})
}
