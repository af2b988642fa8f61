package limit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// A policy in front of an http.Handler. Real applications mount the
// Limiter with their router's adapter (chilimit, echolimit, ginlimit,
// fiberlimit, httplimit) on a memory or Redis store; the reference store
// and its fake clock here only make the output exact.
func Example() {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := limittest.NewStore(clock.Now)
	// 2 requests per minute per client address, fixed windows starting on
	// the minute.
	l := limittest.MustNew(store, limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true})
	h := l.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a note")
	}), nil, nil)

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/v1/notes/1", nil)
		r.RemoteAddr = "192.0.2.1:4711" // the client's socket address: its identity
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	// Output:
	// 200  a note
	// 200  a note
	// 429 60 {"type":"about:blank","title":"Too Many Requests","status":429}
}

// New checks a Policy and names the field it refuses.
func ExampleNew() {
	store := limittest.NewStore(nil)
	for _, p := range []limit.Policy{
		{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 50}, // 10 per second, bursts of 50
		{Algorithm: limit.FixedWindow, Limit: 5, Burst: 10},
		{Limit: 100, Window: 9000 * time.Hour},
	} {
		l, err := limit.New(store, p)
		if err != nil {
			fmt.Println(err)
			continue
		}
		d, _ := l.Consume(context.Background(), "user-1")
		fmt.Println(d.Bucket, d.Allowed, d.Remaining)
	}
	// Output:
	// 10p1gb50 true 49
	// limit: invalid policy: Burst is only used by TokenBucket (Algorithm is fixed-window)
	// limit: invalid policy: Window 9000h0m0s is over the maximum 8784h0m0s
}

// A non-HTTP call site: a job runner that allows each tenant 3 jobs per
// minute and tells the others when to come back.
func ExampleLimiter_Consume() {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	jobs := limittest.MustNew(limittest.NewStore(clock.Now), limit.Policy{
		Name: "jobs", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, AlignWindows: true,
	})
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := jobs.Consume(ctx, "tenant-42")
		switch {
		case err != nil:
			fmt.Println("store failed, decided by the FailureMode:", d.Allowed)
		case d.Allowed:
			fmt.Printf("job %d runs (%d left)\n", i, d.Remaining)
		default:
			fmt.Printf("job %d deferred: retry in %d s\n", i, limit.RetryAfterSeconds(d))
		}
	}
	// Output:
	// job 1 runs (2 left)
	// job 2 runs (1 left)
	// job 3 runs (0 left)
	// job 4 deferred: retry in 60 s
}

// Costs: a batch call takes as many units as it carries items. A batch
// larger than the quota can never be admitted: the Decision says
// OverCapacity, and there is no Retry-After to wait for.
func ExampleLimiter_ConsumeN() {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	items := limittest.MustNew(limittest.NewStore(clock.Now), limit.Policy{
		Name: "items", Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 20,
	})
	ctx := context.Background()
	for _, n := range []int64{15, 10, 25} {
		d, _ := items.ConsumeN(ctx, "client-7", n)
		switch {
		case d.Allowed:
			fmt.Printf("%d items: admitted, %d left\n", n, d.Remaining)
		case d.OverCapacity:
			fmt.Printf("%d items: more than the quota can ever admit; split the batch\n", n)
		default:
			fmt.Printf("%d items: limited, retry in %v\n", n, d.RetryAfter)
		}
	}
	// Output:
	// 15 items: admitted, 5 left
	// 10 items: limited, retry in 500ms
	// 25 items: more than the quota can ever admit; split the batch
}

// Several quotas at once: 2 per 10 s and 3 per minute. A request is
// admitted only when both admit it, and a limited one takes nothing from
// either; the Decision reports the quota closest to exhaustion.
func ExampleRate() {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	l := limittest.MustNew(limittest.NewStore(clock.Now), limit.Policy{
		Name: "reports", Algorithm: limit.FixedWindow, AlignWindows: true,
		Quotas: []limit.Rate{{Limit: 2, Window: 10 * time.Second}, {Limit: 3, Window: time.Minute}},
	})
	for _, wait := range []time.Duration{0, 0, 0, 10 * time.Second, 0} {
		clock.Advance(wait)
		d, _ := l.Consume(context.Background(), "user-1")
		fmt.Println(d.Allowed, d.Limit, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 2 1 0s
	// true 2 0 0s
	// false 2 0 10s
	// true 3 0 0s
	// false 3 0 50s
}

// Per-plan limits: the plan function names each identity's plan; the
// Policy's own quota is the default plan.
func ExamplePolicy_plans() {
	l := limittest.MustNew(limittest.NewStore(nil), limit.Policy{
		Name: "export", Limit: 5, Window: time.Minute,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 20, Window: time.Minute}}},
		Plan: func(r limit.Request) (string, error) {
			if id, _ := r.Native.(string); strings.HasPrefix(id, "pro-") {
				return "pro", nil
			}
			return "", nil
		},
	})
	for _, id := range []string{"pro-acme", "free-bob"} {
		d, _ := l.Consume(context.Background(), id)
		fmt.Printf("%s: plan %q, %d of %d left\n", id, d.Plan, d.Remaining, d.Limit)
	}
	// Output:
	// pro-acme: plan "pro", 19 of 20 left
	// free-bob: plan "", 4 of 5 left
}

// Peek looks at an identity without spending anything; Reset gives it its
// whole allowance back (after a successful password reset, say). The
// identity is the one requests are keyed by: here, for a policy keyed by
// client address, any spelling of the address.
func ExampleLimiter_Reset() {
	ctx := context.Background()
	clock := limittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	l := limittest.MustNew(limittest.NewStore(clock.Now), limit.Policy{Name: "login", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, AlignWindows: true})
	var id string
	for range 4 { // 3 admitted, the 4th limited
		r := httptest.NewRequest("POST", "/v1/login", nil)
		r.RemoteAddr = "[2001:db8::7]:4711"
		id = l.CheckHTTP(httptest.NewRecorder(), r, limit.Request{}).Identity()
	}
	d, _ := l.Peek(ctx, "2001:db8::99") // the same /64
	fmt.Println(id, d.Allowed, d.RetryAfter)
	if err := l.Reset(ctx, id); err != nil {
		fmt.Println(err)
	}
	d, _ = l.Peek(ctx, "[2001:db8::1]:443")
	fmt.Println(d.Allowed, d.Remaining)
	_, err := l.Peek(ctx, "2001:db8::/48")
	fmt.Println(err)
	// Output:
	// 2001:db8:: false 1m0s
	// true 2
	// limit: invalid identity: 2001:db8::/48 spans several identities: requests from addresses of its family are grouped by /64
}
