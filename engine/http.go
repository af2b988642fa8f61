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
// known holds what the adapter knows that r does not say: Route (the
// matched route template, "" when unknown), Unmatched (the router has no
// route for r: it answers 404 or 405) and Native (the framework's own
// context for typed key and cost functions; nil: r itself). Method, Path,
// Peer and Header come from r (Path only when Policy.SkipPaths or a policy
// function reads it; "" otherwise): Path is r.URL.RawPath when the client
// escaped the path, else r.URL.Path (the form chi and echo route on, so that
// SkipPaths never exempts "/%68ealth" while the router serves it with
// another, limited handler), Peer is r.RemoteAddr (the socket peer: never a
// forwarding header) and Header is r.Header. It is safe for concurrent use
// and allocates nothing on an allowed request at the default disclosure.
//
// The Decision is the request's ticket: the adapter passes it to Finish
// once the next handler has answered. A limited request is flagged in
// r.Header under a field name no client can send (it contains a space, and
// is never written on the wire), so that the mounts that charged it earlier
// give their charges back in Finish (stacked mounts: a request limited by
// any mount charges none). The flag is left in place: a request is limited
// once.
func (l *Limiter) CheckHTTP(w http.ResponseWriter, r *http.Request, known Request) Decision {
	var resp response
	l.checkHTTP(w, r, &known, &resp)
	return resp.Decision
}

// checkHTTP is CheckHTTP into resp, whose Decision the caller reads in
// place (HTTPHandler: no copy of it). req holds what the adapter knows
// (Route, Unmatched, Native); the rest is filled in from r, in place (no
// copy of the Request).
func (l *Limiter) checkHTTP(w http.ResponseWriter, r *http.Request, req *Request, resp *response) {
	req.Method, req.Peer, req.Header, req.Path, req.lim = r.Method, r.RemoteAddr, r.Header, "", nil
	if req.Native == nil {
		req.Native = r
	}
	if r.URL != nil && l.needsPath {
		req.Path = r.URL.RawPath
		if req.Path == "" {
			req.Path = r.URL.Path
		}
	}
	l.check(r.Context(), req, resp, nil)
	resp.writeHTTP(w)
	settle(&resp.Decision, markOf(r.Header))
}

// HTTPHandler returns an http.Handler that decides every request with l
// (CheckHTTP) before next, for adapters whose middleware has the standard
// func(http.Handler) http.Handler shape (chi, net/http's ServeMux): an
// allowed request reaches next with the engine's header fields applied and
// its status and body left to next; a limited request gets the engine's
// response and next is not called; a request the policy skips reaches next
// untouched.
//
// route returns the matched route template of a request ("" when unknown)
// and whether the router has no route for it at all (unmatched: 404 or
// 405; see Request.Unmatched); the handler calls it only when something
// reads the route (a PerRoute bucket, the handler label of an Observer, a
// policy function that receives the Request), and a nil route means the
// route is never known.
//
// After next it settles the request (Finish): a request that a later mount
// limited gives its charge back. For a policy with CountStatus, next gets
// the ResponseWriter that observe returns for w, which must record in
// *status the status next writes (the first WriteHeader, or 200 on the
// first Write) and keep w's optional interfaces (http.Flusher,
// http.Hijacker, http.Pusher...); httplimit's StatusWriter is one
// (github.com/felixge/httpsnoop). A nil observe, or a policy without
// CountStatus, leaves w as it is, and the status is unknown (CountStatus
// then counts every request). The handler is safe for concurrent use and
// adds no allocation of its own, except for a policy with CountStatus (the
// status and observe's wrapper).
func (l *Limiter) HTTPHandler(next http.Handler, route func(*http.Request) (template string, unmatched bool),
	observe func(w http.ResponseWriter, status *int) http.ResponseWriter) http.Handler {
	if !l.needsRoute {
		route = nil
	}
	if l.policy.CountStatus == nil {
		observe = nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var known Request
		if route != nil {
			known.Route, known.Unmatched = route(r)
		}
		var resp response
		l.checkHTTP(w, r, &known, &resp)
		d := &resp.Decision
		if !d.Allowed {
			return
		}
		if d.slot != nil {
			l.serveHeld(w, r, next, d)
			return
		}
		if observe != nil {
			l.serveObserved(w, r, next, observe, d)
			return
		}
		next.ServeHTTP(w, r)
		l.Finish(r.Context(), d, 0)
	})
}

// serveObserved runs next with the ResponseWriter that observe returns and
// settles the request with the status it recorded. It is a function of its
// own so that only these requests pay for the status's escape to the heap.
func (l *Limiter) serveObserved(w http.ResponseWriter, r *http.Request, next http.Handler,
	observe func(http.ResponseWriter, *int) http.ResponseWriter, d *Decision) {
	status := new(int)
	next.ServeHTTP(observe(w, status), r)
	if *status == 0 {
		*status = http.StatusOK // nothing written: net/http answers 200
	}
	l.Finish(r.Context(), d, *status)
}
