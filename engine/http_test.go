package limit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestHTTPRequestView(t *testing.T) {
	r := httptest.NewRequest("HEAD", "http://example.com/v1/notes/7?x=1", nil)
	r.RemoteAddr = "[2001:db8::1%eth0]:4711"
	r.Header.Add("X-Forwarded-For", "192.0.2.1")
	r.Header.Add("X-Forwarded-For", "192.0.2.2")
	req := HTTPRequest(r, "/v1/notes/{id}")
	if req.Route != "/v1/notes/{id}" || req.Method != "HEAD" || req.Path != "/v1/notes/7" || req.Peer != r.RemoteAddr {
		t.Fatalf("view %+v", req)
	}
	if req.Native != r {
		t.Fatalf("Native is %T, want the *http.Request", req.Native)
	}
	if got := req.Header.Values("x-forwarded-for"); len(got) != 2 || got[1] != "192.0.2.2" {
		t.Fatalf("Header.Values = %q, want both lines", got)
	}
	if n := testing.AllocsPerRun(100, func() { req = HTTPRequest(r, "") }); n != 0 {
		t.Fatalf("HTTPRequest allocates %v times", n)
	}
}

func TestHTTPHandler(t *testing.T) {
	tests := []struct {
		name      string
		policy    Policy
		observer  bool
		wantCalls int // route lookups over the 3 requests
	}{
		{"shared_skips_route_lookup", Policy{Limit: 2}, false, 0},
		{"per_route_reads_route", Policy{Limit: 2, Scope: PerRoute}, false, 3},
		{"observer_reads_route", Policy{Limit: 2}, true, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			rec := &bucketRecorder{}
			if tc.observer {
				opts = append(opts, WithObserver(rec))
			}
			l := MustNew(newMapStore(1_000_000), tc.policy, opts...)
			calls, hits := 0, 0
			h := l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits++
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "made")
			}), func(*http.Request) string { calls++; return "/a/:id" })
			var last *httptest.ResponseRecorder
			for i := 0; i < 3; i++ {
				last = httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/a/1", nil)
				r.RemoteAddr = "192.0.2.9:1234"
				h.ServeHTTP(last, r)
				if i < 2 && (last.Code != http.StatusCreated || last.Body.String() != "made") {
					t.Fatalf("request %d: %d %q, want the handler's 201", i, last.Code, last.Body.String())
				}
			}
			if last.Code != http.StatusTooManyRequests || hits != 2 {
				t.Fatalf("third request: %d with %d handler runs, want 429 and 2", last.Code, hits)
			}
			if got := last.Body.String(); got != string(body429Default) || last.Header().Get("Content-Type") != ProblemJSON {
				t.Fatalf("denial %q %v", got, last.Header())
			}
			if calls != tc.wantCalls {
				t.Fatalf("route looked up %d times, want %d", calls, tc.wantCalls)
			}
			if tc.observer && rec.handler != "/a/:id" {
				t.Fatalf("observer handler label %q, want the router's spelling", rec.handler)
			}
		})
	}
}

type bucketRecorder struct{ handler string }

func (r *bucketRecorder) Decision(e DecisionEvent)                    { r.handler = e.Handler }
func (r *bucketRecorder) ClientAddressIssue(string, Issue)            {}
func (r *bucketRecorder) StoreError(string, FailureMode)              {}
func (r *bucketRecorder) StoreDuration(string, string, time.Duration) {}
