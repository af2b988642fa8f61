package limitclient_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	limitclient "github.com/quotagate/quotagate/client"
)

// A client whose requests wait for the server's limit instead of failing:
// the first answer is a 429 with Retry-After: 0, the transport sends the GET
// again and the caller sees only the 200.
func Example() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()

	client := &http.Client{Transport: limitclient.New(http.DefaultTransport)}
	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", calls.Load(), "requests")
	// Output: 200 after 2 requests
}

// Partitions by API key: one key's spent quota never delays another key.
func ExampleWithPartition() {
	rt := limitclient.New(http.DefaultTransport,
		limitclient.WithPartition(func(r *http.Request) string { return r.Header.Get("Authorization") }))
	_ = &http.Client{Transport: rt}
}
