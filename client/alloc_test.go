package limitclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	limitclient "github.com/quotagate/quotagate/client"
)

// fixed is a base transport that answers every request with the same
// response and allocates nothing itself.
type fixed struct{ resp *http.Response }

func (f fixed) RoundTrip(*http.Request) (*http.Response, error) { return f.resp, nil }

// While a partition has no spent quota the transport adds no allocation to
// a request: whether the server sends no rate-limit field, a RateLimit field
// with quota left, or a legacy one.
func TestRoundTripWithoutSpentQuotaDoesNotAllocate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"no_fields", http.Header{}},
		{"ratelimit_remaining", http.Header{
			"Ratelimit":        {`"100p60";r=95;t=111`, `"1p1gb5";r=3;t=2`},
			"Ratelimit-Policy": {`"100p60";q=100;w=60`, `"1p1gb5";q=1;w=1`},
		}},
		{"legacy_remaining", http.Header{"X-Ratelimit-Remaining": {"7"}, "X-Ratelimit-Reset": {"1800000000"}}},
		{"server_error", http.Header{"Retry-After": {"3"}}},
	} {
		for _, part := range []struct {
			name string
			opts []limitclient.Option
		}{
			{"by_host", nil},
			{"by_api_key", []limitclient.Option{limitclient.WithPartition(func(r *http.Request) string { return r.Header.Get("X-Api-Key") })}},
		} {
			t.Run(tc.name+"/"+part.name, func(t *testing.T) {
				status := http.StatusOK
				if tc.name == "server_error" {
					status = http.StatusServiceUnavailable // returned as it is without WithRetry503
				}
				rt := limitclient.New(fixed{&http.Response{StatusCode: status, Header: tc.header, Body: http.NoBody}}, part.opts...)
				req := httptest.NewRequest("GET", "http://api.example/v1/search", nil)
				req.Header.Set("X-Api-Key", "k1")
				if n := testing.AllocsPerRun(200, func() { rt.RoundTrip(req) }); n != 0 {
					t.Fatalf("%v allocations per request, want 0", n)
				}
			})
		}
	}
}

// The transport beside the bare base transport, over loopback, against a
// server that sends the RateLimit fields with quota left: the difference in
// allocs/op is what the transport adds (0).
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("RateLimit", `"100p60";r=95;t=111`)
		w.Header().Add("RateLimit-Policy", `"100p60";q=100;w=60`)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	for _, bc := range []struct {
		name string
		rt   func(http.RoundTripper) http.RoundTripper
	}{
		{"bare", func(base http.RoundTripper) http.RoundTripper { return base }},
		{"limitclient", func(base http.RoundTripper) http.RoundTripper { return limitclient.New(base) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rt := bc.rt(srv.Client().Transport)
			req, _ := http.NewRequest("GET", srv.URL, nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
