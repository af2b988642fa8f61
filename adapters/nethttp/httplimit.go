package httplimit

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/felixge/httpsnoop"
	"path"
	"strings"

	limit "github.com/quotagate/quotagate/engine"
)

// Middleware returns net/http middleware (func(http.Handler) http.Handler)
// that decides every request with l before next (limit.Limiter.HTTPHandler).
// Allowed requests reach next with the engine's header fields applied (none
// at the default disclosure) and keep next's status and body; limited
// requests get the engine's response (429 with Retry-After and an RFC 9457
// body by default) and next is not called; requests the policy skips reach
// next untouched.
//
// The route template comes from the ServeMux: when next is a *http.ServeMux,
// or another Middleware mount directly around one (several global limiters
// stacked on one mux), it is looked up in that mux before routing
// (RoutePattern); otherwise it is r.Pattern, set by the ServeMux that routed r
// to this middleware. Safe for concurrent use; l may be shared by several
// mounts, which then draw on the same buckets.
//
// After next the request is settled (limit.Limiter.Finish): a request that
// a later mount limited gives this mount's charge back, and a policy with
// CountStatus gives it back when it does not count the status next wrote,
// which the mount observes through StatusWriter (only for such a policy).
// A handler that panics leaves the request counted (and gives its
// Concurrency slots back).
func Middleware(l *limit.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		var mux *http.ServeMux
		switch n := next.(type) {
		case *http.ServeMux:
			mux = n
		case *mount:
			mux = n.mux
		}
		route := routed
		if mux != nil {
			route = func(r *http.Request) (string, bool) {
				p := RoutePattern(mux, r)
				return p, p == ""
			}
		}
		return &mount{Handler: l.HTTPHandler(next, route, StatusWriter), mux: mux}
	}
}

// mount is a Middleware handler; it remembers the ServeMux it stands in
// front of, if any, so that mounts stacked on it look routes up there too.
type mount struct {
	http.Handler
	mux *http.ServeMux
}

// routed returns the pattern of the ServeMux that already routed r. A
// route-level mount never sees a request the mux did not route, so "" here
// means the route is unknown (r did not come through a ServeMux), never
// unmatched.
func routed(r *http.Request) (string, bool) { return r.Pattern, false }

// RoutePattern returns the pattern of mux that r matches, in the mux's own
// spelling ("GET /v1/notes/{id}"), or "" when nothing matches (404 or 405).
// It calls mux.Handler(r), which does not modify r. A HEAD request matches a
// GET pattern, as in ServeMux. For a request the mux would redirect to a
// cleaned path or a trailing slash, it is the pattern the redirect leads to.
//
// One exception keeps request paths out of buckets: for a CONNECT request
// that the mux would redirect to a trailing slash, mux.Handler reports the
// redirect's target path, not a pattern (CONNECT paths are not cleaned), and
// RoutePattern returns "" instead.
func RoutePattern(mux *http.ServeMux, r *http.Request) string {
	_, p := mux.Handler(r)
	if r.Method == http.MethodConnect && p != "" && r.URL != nil && p == cleanPath(r.URL.Path)+"/" {
		return ""
	}
	return p
}

// cleanPath is net/http's canonical path: rooted, path.Clean'd, with a
// trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// KeyFunc adapts a key function over the *http.Request (r.PathValue works in
// it) to Policy.KeyFunc: limit.KeyFuncOf, which explains blank results,
// errors and panics.
func KeyFunc(f func(r *http.Request) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over the *http.Request to
// Policy.CostFunc: limit.CostFuncOf.
func CostFunc(f func(r *http.Request) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over the *http.Request to Policy.Plan, e.g. to
// choose a request's plan from its API key: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// framework.
func PlanFunc(f func(r *http.Request) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}

// StatusWriter returns w wrapped so that the status written through it is
// recorded in *status: the code of the first WriteHeader that is not
// informational (1xx), or 200 on the first Write, ReadFrom or Flush before
// any, as net/http answers. The wrapper keeps exactly w's optional
// interfaces (http.Flusher, http.Hijacker, http.Pusher, io.ReaderFrom,
// http.CloseNotifier, and Unwrap for http.ResponseController), through
// github.com/felixge/httpsnoop. It is the observe function of
// limit.Limiter.HTTPHandler for policies with CountStatus, which the
// Middleware of this package and of chilimit pass; one wrapper and its
// hooks are allocated per call. A connection hijacked before any status
// (a WebSocket upgrade) records 101 Switching Protocols; nothing written at
// all leaves 0, which HTTPHandler reads as the 200 net/http then sends.
func StatusWriter(w http.ResponseWriter, status *int) http.ResponseWriter {
	set := func(code int) {
		if *status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
			*status = code
		}
	}
	return httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) { set(code); next(code) }
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) { set(http.StatusOK); return next(b) }
		},
		WriteString: func(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
			return func(s string) (int, error) { set(http.StatusOK); return next(s) }
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) { set(http.StatusOK); return next(src) }
		},
		Flush: func(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
			return func() { set(http.StatusOK); next() }
		},
		Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
			return func() (net.Conn, *bufio.ReadWriter, error) { set(http.StatusSwitchingProtocols); return next() }
		},
	})
}
