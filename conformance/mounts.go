package conformance

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// CheckMounts checks that a PerRoute limiter finds the matched route template
// on every way an adapter mounts it (a root mount, groups, subrouters,
// route-level mounts: the adapter names them in mounts). For each mount,
// serve must serve GET and HEAD on the route /v1/notes/{id} (in the
// router's spelling) with l mounted that way and a handler that answers 200
// with the body "note", and return the base URL. Then ids 1-3 with GET and
// HEAD draw on one bucket of 4 (the 5th request is limited), the bucket is
// the template's ("/v1/notes/{id} 4p60f"), no route-unknown issue is
// reported, the handler label is handler (unchecked when ""), and another
// client has its own bucket.
func CheckMounts(t *testing.T, handler string, mounts []string, serve func(t *testing.T, mount string, l *limit.Limiter) string) {
	for _, mount := range mounts {
		t.Run(mount, func(t *testing.T) {
			t.Parallel()
			rec := &limittest.Recorder{}
			store := limittest.NewStore(limittest.NewClock(epoch).Now)
			l := limittest.MustNew(store, limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
				limit.WithObserver(rec))
			url := serve(t, mount, l)
			c := limittest.ClientFrom("127.0.0.5")
			t.Cleanup(c.CloseIdleConnections)
			for _, q := range []struct{ method, path string }{{"GET", "/v1/notes/1"}, {"GET", "/v1/notes/2"}, {"HEAD", "/v1/notes/3"}, {"HEAD", "/v1/notes/1"}} {
				if r := limittest.Do(t, c, q.method, url+q.path); r.Status != http.StatusOK || (q.method == "GET" && r.Body != "note") {
					t.Fatalf("%s %s: %d %q, want the handler's 200", q.method, q.path, r.Status, r.Body)
				}
			}
			if r := limittest.Do(t, c, "GET", url+"/v1/notes/99"); r.Status != http.StatusTooManyRequests || r.Body == "note" {
				t.Fatalf("5th request on the route: %d %q, want 429 without the handler (ids, GET and HEAD share one bucket)", r.Status, r.Body)
			}
			if e := rec.Last(); e.Bucket != "/v1/notes/{id} 4p60f" || (handler != "" && e.Handler != handler) {
				t.Fatalf("event %+v, want the route template bucket and the handler label %q", e, handler)
			}
			if n := rec.Issues(limit.Issue("route-unknown")); n != 0 {
				t.Fatalf("%d route-unknown issues, want 0", n)
			}
			other := limittest.ClientFrom("127.0.0.6")
			t.Cleanup(other.CloseIdleConnections)
			if r := limittest.Do(t, other, "GET", url+"/v1/notes/1"); r.Status != http.StatusOK {
				t.Fatalf("other client: %d, want 200 (its own bucket)", r.Status)
			}
		})
	}
}

// CheckSpellings checks that a PerRoute limiter counts a request in the
// bucket of the route the router finally serves, whatever spelling of the
// path the client sent: for each spelling in served (a trailing slash,
// doubled slashes, dot segments, an escaped slash, another letter case: the
// ones the router, or path-rewriting middleware mounted where the adapter's
// documentation says, serves as POST /v1/login), the decision is in the
// route's bucket ("/v1/login Np60f") with its handler label, and the route's
// allowance is shared by all of them. serve must serve POST /v1/login (200)
// with l mounted the way the adapter documents, and return the base URL.
// The route's limit is one more than the spellings: after POST /v1/login and
// one request per spelling (each not limited: 200, or the router's
// redirect), the next POST /v1/login is limited.
func CheckSpellings(t *testing.T, served []string, serve func(t *testing.T, l *limit.Limiter) string) {
	t.Helper()
	rec := &limittest.Recorder{}
	n := int64(len(served) + 1)
	l := limittest.MustNew(limittest.NewStore(limittest.NewClock(epoch).Now),
		limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: n, Window: time.Minute}, limit.WithObserver(rec))
	url := serve(t, l)
	c := limittest.ClientFrom("127.0.0.5")
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	t.Cleanup(c.CloseIdleConnections)
	bucket := "/v1/login " + strconv.FormatInt(n, 10) + "p60f"
	if r := limittest.Do(t, c, "POST", url+"/v1/login"); r.Status != http.StatusOK {
		t.Fatalf("POST /v1/login: %d, want 200", r.Status)
	}
	handler := rec.Last().Handler
	for _, p := range served {
		r := limittest.Do(t, c, "POST", url+p)
		if r.Status == http.StatusTooManyRequests || r.Status == http.StatusNotFound || r.Status == http.StatusMethodNotAllowed {
			t.Fatalf("POST %s: %d, want the route served (or the router's redirect to it)", p, r.Status)
		}
		if e := rec.Last(); e.Bucket != bucket || e.Handler != handler {
			t.Fatalf("POST %s: event %+v, want the route's bucket %q and handler %q", p, e, bucket, handler)
		}
	}
	if r := limittest.Do(t, c, "POST", url+"/v1/login"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("POST /v1/login after %d spellings: %d, want 429: every spelling counts in the route's allowance of %d", len(served), r.Status, n)
	}
	if k := rec.Issues(limit.Issue("route-unknown")); k != 0 {
		t.Fatalf("%d route-unknown issues, want 0", k)
	}
}
