package limitclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limitclient "github.com/quotagate/quotagate/client"
)

func TestRetryAfterIsHonouredThenRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		ra   func(now time.Time) string
		want time.Duration
	}{
		{"delay_seconds", func(time.Time) string { return "3" }, 3 * time.Second},
		{"delay_seconds_zero", func(time.Time) string { return "0" }, 0},
		{"imf_fixdate", func(now time.Time) string { return now.Add(7 * time.Second).Format(http.TimeFormat) }, 7 * time.Second},
		{"rfc850_date", func(now time.Time) string { return now.Add(4 * time.Second).Format(time.RFC850) }, 4 * time.Second},
		{"asctime_date", func(now time.Time) string { return now.Add(6 * time.Second).UTC().Format(time.ANSIC) }, 6 * time.Second},
		{"with_whitespace", func(time.Time) string { return " 2\t" }, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			s, srv, c := serve(t, clk, []answer{limited(tc.ra(clk.Now())), ok(nil)})
			resp := get(t, c, srv.URL)
			if resp.StatusCode != http.StatusOK || s.hits.Load() != 2 {
				t.Fatalf("status %d after %d requests, want 200 after 2", resp.StatusCode, s.hits.Load())
			}
			if got := clk.Slept(); !slices.Equal(got, []time.Duration{tc.want}) {
				t.Fatalf("slept %v, want [%v]", got, tc.want)
			}
		})
	}
}

// Odd and hostile Retry-After values: each is ignored (the 1 s backoff,
// whose jitter is 0 here: 500 ms), or counts as too long (the 429 comes back
// at once), or is a wait of 0; never a longer wait than the MaxWait.
func TestHostileRetryAfter(t *testing.T) {
	const backoff = 500 * time.Millisecond
	tenYears := func(now time.Time) string { return now.AddDate(10, 0, 0).Format(http.TimeFormat) }
	for _, tc := range []struct {
		name       string
		ra         func(now time.Time) string
		wantStatus int
		wantHits   int64
		wantSlept  []time.Duration
	}{
		{"negative", func(time.Time) string { return "-5" }, 200, 2, []time.Duration{backoff}},
		{"fractional", func(time.Time) string { return "1.5" }, 200, 2, []time.Duration{backoff}},
		{"non_numeric", func(time.Time) string { return "soon" }, 200, 2, []time.Duration{backoff}},
		{"empty", func(time.Time) string { return "" }, 200, 2, []time.Duration{backoff}},
		{"plus_sign", func(time.Time) string { return "+3" }, 200, 2, []time.Duration{backoff}},
		{"huge", func(time.Time) string { return "99999999999999999999999" }, 429, 1, nil},
		{"ten_years_seconds", func(time.Time) string { return "315360000" }, 429, 1, nil},
		{"ten_years_date", tenYears, 429, 1, nil},
		{"over_max_wait", func(time.Time) string { return "31" }, 429, 1, nil},
		{"garbled_date", func(time.Time) string { return "Mon, 32 Foo 2026 25:61:00 GMT" }, 200, 2, []time.Duration{backoff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			s, srv, c := serve(t, clk, []answer{limited(tc.ra(clk.Now())), ok(nil)})
			resp := get(t, c, srv.URL)
			if resp.StatusCode != tc.wantStatus || s.hits.Load() != tc.wantHits {
				t.Fatalf("status %d after %d requests, want %d after %d", resp.StatusCode, s.hits.Load(), tc.wantStatus, tc.wantHits)
			}
			if got := clk.Slept(); !slices.Equal(got, tc.wantSlept) {
				t.Fatalf("slept %v, want %v", got, tc.wantSlept)
			}
		})
	}
}

func TestPastRetryAfterRetriesAtMostMaxRetries(t *testing.T) {
	clk := newFakeClock()
	past := clk.Now().Add(-time.Hour).Format(http.TimeFormat)
	s, srv, c := serve(t, clk, []answer{limited(past)}, limitclient.WithMaxRetries(3))
	resp := get(t, c, srv.URL)
	if resp.StatusCode != http.StatusTooManyRequests || s.hits.Load() != 4 {
		t.Fatalf("status %d after %d requests, want 429 after 4", resp.StatusCode, s.hits.Load())
	}
	if got := clk.Slept(); !slices.Equal(got, []time.Duration{0, 0, 0}) {
		t.Fatalf("slept %v, want three waits of 0", got)
	}
}

func TestMaxRetriesZeroReturnsTheFirst429(t *testing.T) {
	clk := newFakeClock()
	s, srv, c := serve(t, clk, []answer{limited("1"), ok(nil)}, limitclient.WithMaxRetries(0))
	if resp := get(t, c, srv.URL); resp.StatusCode != 429 || s.hits.Load() != 1 {
		t.Fatalf("status %d after %d requests, want 429 after 1", resp.StatusCode, s.hits.Load())
	}
	// The partition is spent for the Retry-After: the next request waits.
	if resp := get(t, c, srv.URL); resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if got := clk.Slept(); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Fatalf("slept %v, want [1s]", got)
	}
}

func TestBackoffWithoutHintsDoubles(t *testing.T) {
	clk := newFakeClock()
	bare := status(http.StatusTooManyRequests, nil)
	s, srv, c := serve(t, clk, []answer{bare, bare, bare, ok(nil)}, limitclient.WithMaxRetries(3),
		limitclient.WithJitter(func(n int64) int64 { return n - 1 })) // the top of each range
	if resp := get(t, c, srv.URL); resp.StatusCode != 200 || s.hits.Load() != 4 {
		t.Fatalf("status %d after %d requests, want 200 after 4", resp.StatusCode, s.hits.Load())
	}
	if got, want := clk.Slept(), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("slept %v, want %v", got, want)
	}
}

func TestRetryWaitsForTheRateLimitFieldWithoutRetryAfter(t *testing.T) {
	clk := newFakeClock()
	s, srv, c := serve(t, clk, []answer{
		status(429, map[string]string{"RateLimit": `"p";r=0;t=4`}),
		ok(nil),
	})
	if resp := get(t, c, srv.URL); resp.StatusCode != 200 || s.hits.Load() != 2 {
		t.Fatalf("status %d after %d requests, want 200 after 2", resp.StatusCode, s.hits.Load())
	}
	if got := clk.Slept(); !slices.Equal(got, []time.Duration{4 * time.Second}) {
		t.Fatalf("slept %v, want [4s]", got)
	}
}

func TestSpentQuotaWaitsBeforeSending(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   []time.Duration // waits of the second request
	}{
		{"ietf_t", map[string]string{"RateLimit": `"p";r=0;t=5`}, []time.Duration{5 * time.Second}},
		{"ietf_per_unit", map[string]string{"RateLimit": `"p";r=0;t=5`, "RateLimit-Policy": `"p";q=1;w=1`}, []time.Duration{time.Second}},
		{"ietf_per_unit_fraction", map[string]string{"RateLimit": `"p";r=0;t=30`, "RateLimit-Policy": `"p";q=4;w=10`}, []time.Duration{2500 * time.Millisecond}},
		{"ietf_t_sooner_than_per_unit", map[string]string{"RateLimit": `"p";r=0;t=2`, "RateLimit-Policy": `"p";q=1;w=60`}, []time.Duration{2 * time.Second}},
		{"ietf_remaining", map[string]string{"RateLimit": `"p";r=3;t=5`}, nil},
		{"ietf_longest_policy_wins", map[string]string{"RateLimit": `"a";r=0;t=3, "b";r=0;t=9, "c";r=7;t=60`}, []time.Duration{9 * time.Second}},
		{"triplet", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "6"}, []time.Duration{6 * time.Second}},
		{"triplet_remaining", map[string]string{"RateLimit-Remaining": "1", "RateLimit-Reset": "6"}, nil},
		{"legacy_delta", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "8"}, []time.Duration{8 * time.Second}},
		{"legacy_epoch", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "NOW+11"}, []time.Duration{11 * time.Second}},
		{"legacy_epoch_past", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "NOW-400"}, nil},
		{"ietf_wins_over_legacy", map[string]string{"RateLimit": `"p";r=2;t=5`, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "8"}, nil},
		{"over_max_wait_sends_at_once", map[string]string{"RateLimit": `"p";r=0;t=315360000`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			h := map[string]string{}
			for k, v := range tc.header {
				switch v {
				case "NOW+11":
					v = strconv.FormatInt(clk.Now().Unix()+11, 10)
				case "NOW-400":
					v = strconv.FormatInt(clk.Now().Unix()-400, 10)
				}
				h[k] = v
			}
			s, srv, c := serve(t, clk, []answer{ok(h), ok(nil)})
			get(t, c, srv.URL)
			if got := clk.Slept(); len(got) != 0 {
				t.Fatalf("first request slept %v", got)
			}
			if resp := get(t, c, srv.URL); resp.StatusCode != 200 || s.hits.Load() != 2 {
				t.Fatalf("status %d after %d requests, want 200 after 2", resp.StatusCode, s.hits.Load())
			}
			if got := clk.Slept(); !slices.Equal(got, tc.want) {
				t.Fatalf("slept %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPartitionsAreIndependent(t *testing.T) {
	clk := newFakeClock()
	s := &script{answers: []answer{ok(nil)}}
	exhausted := ok(map[string]string{"RateLimit": `"p";r=0;t=20`})
	s.answers = []answer{exhausted, ok(nil)}
	_, srv, c := serve(t, clk, nil, limitclient.WithPartition(func(r *http.Request) string { return r.Header.Get("X-Api-Key") }))
	srv.Config.Handler = s
	send := func(key string) {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send("alice") // alice's quota is spent for 20 s
	send("bob")
	send("bob")
	if got := clk.Slept(); len(got) != 0 {
		t.Fatalf("bob's requests slept %v", got)
	}
	send("alice")
	if got := clk.Slept(); !slices.Equal(got, []time.Duration{20 * time.Second}) {
		t.Fatalf("slept %v, want alice's [20s]", got)
	}
}

func TestPartitionFuncPanicFallsBackToHost(t *testing.T) {
	clk := newFakeClock()
	s, srv, c := serve(t, clk, []answer{ok(map[string]string{"RateLimit": `"p";r=0;t=2`}), ok(nil)},
		limitclient.WithPartition(func(*http.Request) string { panic("boom") }))
	get(t, c, srv.URL)
	get(t, c, srv.URL)
	if s.hits.Load() != 2 || !slices.Equal(clk.Slept(), []time.Duration{2 * time.Second}) {
		t.Fatalf("%d requests, slept %v; want 2 and the host's [2s]", s.hits.Load(), clk.Slept())
	}
}

// A 429 is retried when the request can be replayed: an idempotent method
// without a body, a body with GetBody, or an idempotency key; never a
// streamed body or a bare non-idempotent method.
func TestOnlyReplayableRequestsAreRetried(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      func(url string) *http.Request
		wantHits int64
	}{
		{"post_without_body", func(u string) *http.Request { r, _ := http.NewRequest("POST", u, nil); return r }, 1},
		{"post_streamed_body", func(u string) *http.Request {
			r, _ := http.NewRequest("POST", u, strings.NewReader("x"))
			r.GetBody = nil
			return r
		}, 1},
		{"put_streamed_body", func(u string) *http.Request {
			r, _ := http.NewRequest("PUT", u, strings.NewReader("x"))
			r.GetBody = nil
			return r
		}, 1},
		{"post_idempotency_key", func(u string) *http.Request {
			r, _ := http.NewRequest("POST", u, nil)
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, 2},
		{"get", func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }, 2},
		{"head", func(u string) *http.Request { r, _ := http.NewRequest("HEAD", u, nil); return r }, 2},
		{"options", func(u string) *http.Request { r, _ := http.NewRequest("OPTIONS", u, nil); return r }, 2},
		{"put_without_body", func(u string) *http.Request { r, _ := http.NewRequest("PUT", u, nil); return r }, 2},
		{"put_replayable_body", func(u string) *http.Request {
			r, _ := http.NewRequest("PUT", u, strings.NewReader("payload"))
			return r
		}, 2},
		{"patch_without_body", func(u string) *http.Request { r, _ := http.NewRequest("PATCH", u, nil); return r }, 1},
		{"get_streamed_body", func(u string) *http.Request {
			r, _ := http.NewRequest("GET", u, io.NopCloser(strings.NewReader("x")))
			return r
		}, 1},
		{"delete", func(u string) *http.Request { r, _ := http.NewRequest("DELETE", u, nil); return r }, 2},
		{"post_replayable_body", func(u string) *http.Request {
			r, _ := http.NewRequest("POST", u, bytes.NewReader([]byte("payload")))
			return r
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			s, srv, c := serve(t, clk, []answer{limited("1"), ok(nil)})
			resp, err := c.Do(tc.req(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if s.hits.Load() != tc.wantHits {
				t.Fatalf("%d requests, want %d", s.hits.Load(), tc.wantHits)
			}
			if tc.wantHits == 2 {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.bodies[0] != s.bodies[1] {
					t.Fatalf("bodies %q, want the same body twice", s.bodies)
				}
			}
		})
	}
}

func TestDeadlineBoundsEveryWait(t *testing.T) {
	clk := newFakeClock()
	s, srv, c := serve(t, clk, []answer{limited("5"), ok(nil)})
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(2*time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || s.hits.Load() != 1 || len(clk.Slept()) != 0 {
		t.Fatalf("status %d after %d requests, slept %v; want the 429 at once", resp.StatusCode, s.hits.Load(), clk.Slept())
	}
	// The partition is spent for 5 s; a request with 2 s left is sent at
	// once rather than waiting past its deadline.
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s.hits.Load() != 2 || len(clk.Slept()) != 0 {
		t.Fatalf("status %d after %d requests, slept %v; want 200 without a wait", resp.StatusCode, s.hits.Load(), clk.Slept())
	}
}

// A context cancelled during a real wait ends it with the context's error.
func TestCancelDuringWaitReturnsContextError(t *testing.T) {
	t.Parallel()
	s := &script{answers: []answer{limited("10")}}
	srv := newServer(t, s)
	c := &http.Client{Transport: limitclient.New(srv.Client().Transport)}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	t0 := time.Now()
	_, err := c.Do(req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("returned after %v", d)
	}
}

func TestRetry503(t *testing.T) {
	unavailable := func(ra string) answer {
		h := map[string]string{}
		if ra != "" {
			h["Retry-After"] = ra
		}
		return status(http.StatusServiceUnavailable, h)
	}
	t.Run("off_by_default", func(t *testing.T) {
		clk := newFakeClock()
		s, srv, c := serve(t, clk, []answer{unavailable("1"), ok(nil)})
		if resp := get(t, c, srv.URL); resp.StatusCode != 503 || s.hits.Load() != 1 {
			t.Fatalf("status %d after %d requests, want 503 after 1", resp.StatusCode, s.hits.Load())
		}
	})
	t.Run("jittered_backoff", func(t *testing.T) {
		clk := newFakeClock()
		var ranges []int64
		jitter := func(n int64) int64 { ranges = append(ranges, n); return n / 2 }
		s, srv, c := serve(t, clk, []answer{unavailable(""), unavailable(""), ok(nil)},
			limitclient.WithRetry503(100*time.Millisecond), limitclient.WithJitter(jitter))
		if resp := get(t, c, srv.URL); resp.StatusCode != 200 || s.hits.Load() != 3 {
			t.Fatalf("status %d after %d requests, want 200 after 3", resp.StatusCode, s.hits.Load())
		}
		// [50, 100] ms then [100, 200] ms, each at its middle.
		if got, want := clk.Slept(), []time.Duration{75 * time.Millisecond, 150 * time.Millisecond}; !slices.Equal(got, want) {
			t.Fatalf("slept %v, want %v", got, want)
		}
	})
	t.Run("retry_after_is_the_floor", func(t *testing.T) {
		clk := newFakeClock()
		_, srv, c := serve(t, clk, []answer{unavailable("3"), ok(nil)}, limitclient.WithRetry503(100*time.Millisecond))
		get(t, c, srv.URL)
		if got := clk.Slept(); !slices.Equal(got, []time.Duration{3 * time.Second}) {
			t.Fatalf("slept %v, want [3s]", got)
		}
	})
}

func TestMaxWaitOption(t *testing.T) {
	clk := newFakeClock()
	s, srv, c := serve(t, clk, []answer{limited("6"), ok(nil)}, limitclient.WithMaxWait(5*time.Second))
	if resp := get(t, c, srv.URL); resp.StatusCode != 429 || s.hits.Load() != 1 {
		t.Fatalf("status %d after %d requests, want 429 after 1", resp.StatusCode, s.hits.Load())
	}
}

func TestInvalidOptionsPanicNamingTheOption(t *testing.T) {
	for name, opt := range map[string]limitclient.Option{
		"WithMaxWait":       limitclient.WithMaxWait(0),
		"WithMaxRetries":    limitclient.WithMaxRetries(-1),
		"WithMaxPartitions": limitclient.WithMaxPartitions(0),
		"WithRetry503":      limitclient.WithRetry503(-time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), name) {
					t.Fatalf("panic %v, want one naming %s", r, name)
				}
			}()
			limitclient.New(nil, opt)
		})
	}
}

// Eight goroutines, four per partition; one partition is spent for 20 s at a time.
// The other partition's requests never wait.
func TestSpentPartitionNeverDelaysAnother(t *testing.T) {
	type keyCtx struct{}
	var mu sync.Mutex
	slept := map[string]time.Duration{}
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		slept[ctx.Value(keyCtx{}).(string)] += d
		mu.Unlock()
		return nil
	}
	clk := newFakeClock()
	s := &script{}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.Header.Get("X-Api-Key") == "spent" {
			w.Header().Set("RateLimit", `"p";r=0;t=20`)
		}
	}))
	c := &http.Client{Transport: limitclient.New(srv.Client().Transport,
		limitclient.WithClock(clk.Now, sleep),
		limitclient.WithPartition(func(r *http.Request) string { return r.Header.Get("X-Api-Key") }))}
	var wg sync.WaitGroup
	for g := range 8 {
		key := []string{"spent", "fresh"}[g%2]
		wg.Go(func() {
			for range 20 {
				req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), keyCtx{}, key), "GET", srv.URL, nil)
				req.Header.Set("X-Api-Key", key)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if slept["fresh"] != 0 {
		t.Fatalf("the fresh partition waited %v", slept["fresh"])
	}
	if slept["spent"] == 0 {
		t.Fatal("the spent partition never waited")
	}
}

// The same at real time, over loopback: while one partition's quota is
// spent for 2 s (its four goroutines wait for it), the other partition's
// four goroutines send all their requests; every one of them is back
// before the first request of the spent partition.
func TestSpentPartitionNeverDelaysAnotherAtRealTime(t *testing.T) {
	t.Parallel()
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") == "spent" {
			w.Header().Set("RateLimit", `"p";r=0;t=2`)
		} else {
			w.Header().Set("RateLimit", `"p";r=99;t=60`)
		}
	}))
	c := &http.Client{Transport: limitclient.New(srv.Client().Transport,
		limitclient.WithPartition(func(r *http.Request) string { return r.Header.Get("X-Api-Key") }))}
	send := func(key string) error {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := send("spent"); err != nil { // spends the partition for 2 s
		t.Fatal(err)
	}
	t0 := time.Now()
	var mu sync.Mutex
	var freshLast, freshSlowest time.Duration
	spentFirst := time.Duration(1<<63 - 1)
	var wg sync.WaitGroup
	for g := range 8 {
		key := []string{"spent", "fresh"}[g%2]
		wg.Go(func() {
			n := 1
			if key == "fresh" {
				n = 20
			}
			for range n {
				t1 := time.Now()
				if err := send(key); err != nil {
					t.Error(err)
					return
				}
				done, took := time.Since(t0), time.Since(t1)
				mu.Lock()
				if key == "fresh" {
					freshLast, freshSlowest = max(freshLast, done), max(freshSlowest, took)
				} else {
					spentFirst = min(spentFirst, done)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("fresh: 80 requests, the last back after %v, the slowest took %v; spent: the first back after %v",
		freshLast.Round(time.Microsecond), freshSlowest.Round(time.Microsecond), spentFirst.Round(time.Millisecond))
	if spentFirst < time.Second {
		t.Fatalf("the spent partition's first request was back after %v, want it to wait about 2 s", spentFirst)
	}
	if freshLast >= spentFirst {
		t.Fatalf("the fresh partition's last request was back after %v, not before the spent one's first (%v)", freshLast, spentFirst)
	}
}

type idleCloser struct {
	fixed
	closed int
}

func (c *idleCloser) CloseIdleConnections() { c.closed++ }

func TestCloseIdleConnectionsReachesTheBase(t *testing.T) {
	base := &idleCloser{}
	c := &http.Client{Transport: limitclient.New(base)}
	c.CloseIdleConnections()
	if base.closed != 1 {
		t.Fatalf("base's CloseIdleConnections called %d times, want 1", base.closed)
	}
}

type trackedBody struct {
	*strings.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

// A request that never goes out (its context ended while it waited for its
// partition) has its body closed, as a RoundTripper must.
func TestBodyClosedWhenTheWaitEnds(t *testing.T) {
	clk := newFakeClock()
	s, srv, _ := serve(t, clk, []answer{ok(map[string]string{"RateLimit": `"p";r=0;t=5`})})
	rt := limitclient.New(srv.Client().Transport, limitclient.WithClock(clk.Now,
		func(ctx context.Context, d time.Duration) error { return context.Canceled }))
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := rt.RoundTrip(req) // spends the partition for 5 s
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	body := &trackedBody{Reader: strings.NewReader("x")}
	req, _ = http.NewRequest("PUT", srv.URL, body)
	if _, err := rt.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if !body.closed || s.hits.Load() != 1 {
		t.Fatalf("body closed %v, %d requests; want closed and 1", body.closed, s.hits.Load())
	}
}

// A 429 whose body never ends (a few bytes, then nothing) holds the retry
// no longer than its wait: the transport reads the body while it waits and
// then closes it, instead of reading up to 64 KiB with no time limit.
func TestEndlessRetryBodyHoldsNoLongerThanTheWait(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > 1 {
			return // 200
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		<-release
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	clk := newFakeClock()
	c := &http.Client{Transport: limitclient.New(srv.Client().Transport,
		limitclient.WithClock(clk.Now, clk.Sleep), limitclient.WithJitter(func(int64) int64 { return 0 }))}
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		resp.Body.Close()
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp != nil && (resp.StatusCode != http.StatusOK || hits.Load() != 2) {
			t.Errorf("status %d after %d requests, want 200 after 2", resp.StatusCode, hits.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip still blocked on the 429's endless body after 10 s (its wait was 1 s on a fake clock)")
	}
}

// A wait past the MaxWait that one answer asks for (a daily quota's 429)
// leaves no trace in the partition: a shorter hint after it still makes the
// next request wait, and the partition table keeps room for others.
func TestHintPastMaxWaitHoldsNoPartition(t *testing.T) {
	t.Run("later hints count", func(t *testing.T) {
		clk := newFakeClock()
		spent := ok(map[string]string{"RateLimit": `"p";r=0;t=1`})
		_, srv, c := serve(t, clk, []answer{limited("3600"), spent, spent}, limitclient.WithMaxRetries(0))
		if resp := get(t, c, srv.URL); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("first answer %d, want the 429 returned at once", resp.StatusCode)
		}
		get(t, c, srv.URL) // says: spent for 1 s
		get(t, c, srv.URL)
		if got, want := clk.Slept(), []time.Duration{time.Second}; !slices.Equal(got, want) {
			t.Fatalf("slept %v, want %v: the hour's 429 hid the later 1 s hint", got, want)
		}
	})
	t.Run("table", func(t *testing.T) {
		clk := newFakeClock()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("K") == "a" {
				w.Header().Set("Retry-After", "315360000") // 10 years
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.Header().Set("RateLimit", `"p";r=0;t=1`)
		})
		srv := newServer(t, h)
		c := &http.Client{Transport: limitclient.New(srv.Client().Transport,
			limitclient.WithClock(clk.Now, clk.Sleep), limitclient.WithMaxRetries(0), limitclient.WithMaxPartitions(1),
			limitclient.WithPartition(func(r *http.Request) string { return r.Header.Get("K") }))}
		for _, k := range []string{"a", "b", "b"} {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("K", k)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if got, want := clk.Slept(), []time.Duration{time.Second}; !slices.Equal(got, want) {
			t.Fatalf("slept %v, want %v: a's 10-year wait took the only place in the table", got, want)
		}
	})
}

// stuckBody is a body whose Close waits for a Read in progress, and whose
// Read never returns until release is closed (io.ReadCloser promises
// nothing about a Close during a Read).
type stuckBody struct {
	mu      sync.Mutex
	release chan struct{}
}

func (b *stuckBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	<-b.release
	return 0, io.EOF
}

func (b *stuckBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A retried 429 whose body can be neither read to its end nor closed
// holds its request no longer than the request's context.
func TestRetryBodyThatCannotCloseHoldsNoLongerThanTheContext(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		h.Set("Retry-After", "0")
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: &stuckBody{release: release}, Request: r}, nil
	})
	clk := newFakeClock()
	rt := limitclient.New(base, limitclient.WithClock(clk.Now, clk.Sleep))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://example.invalid/", nil)
	done := make(chan error, 1)
	go func() {
		_, err := rt.RoundTrip(req)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip still blocked on a body that cannot close, 10 s after its context ended")
	}
}
