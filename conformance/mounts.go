package conformance

import (
	"net/http"
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
			l := limit.MustNew(store, limit.Policy{Limit: 4, Window: time.Minute, Scope: limit.PerRoute, Algorithm: limit.FixedWindow},
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
			if n := rec.Issues(limit.IssueRouteUnknown); n != 0 {
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
