package limit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// stacked serves a global mount around a per-route mount of POST /login
// (through the engine's HTTPHandler, as chi and net/http mount them), and
// GET /other under the global mount only.
func stacked(global, login *limit.Limiter) http.Handler {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	route := func(r *http.Request) (string, bool) { return r.URL.Path, false }
	loginH := login.HTTPHandler(ok, route, nil)
	return global.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			loginH.ServeHTTP(w, r)
			return
		}
		ok.ServeHTTP(w, r)
	}), route, nil)
}

func serveRec(h http.Handler, method, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Stacked mounts: global Shared 10 per minute + PerRoute POST /login 2 per
// minute; 5 logins. Only the 2 admitted logins stay charged to the global
// limit: 8 remain afterwards (a GET then shows r=7, its own charge
// included), where every mount counting once left 5.
func TestStackedMountsChargeNoMountWhenLimited(t *testing.T) {
	s := storeAt(epochMS)
	global := limittest.MustNew(s, limit.Policy{Name: "global", Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute,
		AlignWindows: true, Disclosure: limit.DiscloseAlways})
	login := limittest.MustNew(s, limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true})
	h := stacked(global, login)
	for i, want := range []int{204, 204, 429, 429, 429} {
		w := serveRec(h, "POST", "/login")
		if w.Code != want {
			t.Fatalf("login %d: status %d, want %d", i+1, w.Code, want)
		}
		if i >= 2 && !strings.Contains(w.Header().Get("RateLimit"), `"global";r=7`) {
			t.Fatalf("login %d: RateLimit %q: the global member should show 2 earlier logins + this one", i+1, w.Header().Get("RateLimit"))
		}
	}
	w := serveRec(h, "GET", "/other")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"global";r=7;`) {
		t.Fatalf("after 5 logins, GET /other: RateLimit %q; want r=7 (8 left before it: 2 admitted logins)", got)
	}
}

// A request the inner mount limited, refunded to the outer one, was counted
// as allowed by the outer mount's Decision event: the Refund event says it
// was given back (reason later-mount), once per refund, so that allowed
// minus refunded is what the outer bucket served. A status CountStatus does
// not count is a refund with reason status.
func TestRefundsAreReported(t *testing.T) {
	s := storeAt(epochMS)
	rec := &limittest.Recorder{}
	global := limittest.MustNew(s, limit.Policy{Name: "global", Limit: 10, Window: time.Minute}, limit.WithObserver(rec))
	login := limittest.MustNew(s, limit.Policy{Name: "login", Limit: 2, Window: time.Minute}, limit.WithObserver(rec))
	h := stacked(global, login)
	for range 5 {
		serveRec(h, "POST", "/login")
	}
	allowed := 0
	for _, e := range rec.Decisions() {
		if e.Bucket == "global" && e.Outcome == limit.OutcomeAllowed {
			allowed++
		}
	}
	if got := rec.Refunds(limit.RefundLaterMount); allowed != 5 || got != 3 {
		t.Fatalf("global: %d allowed events, %d later-mount refunds; want 5 and 3 (2 served)", allowed, got)
	}
	st := limittest.MustNew(s, limit.Policy{Name: "status", Limit: 10, CountStatus: countFailures}, limit.WithObserver(rec))
	ctx := context.Background()
	d, _ := st.Consume(ctx, "a")
	st.Finish(ctx, &d, 200)
	d, _ = st.Consume(ctx, "a")
	st.Finish(ctx, &d, 500)
	if got := rec.Refunds(limit.RefundStatus); got != 1 {
		t.Fatalf("%d status refunds, want 1", got)
	}
	if !slices.Contains(rec.Events(), "refund status|status") {
		t.Fatalf("events %q lack the refund", rec.Events())
	}
}

// Under FailLocal, a request the local store admitted while the shared one
// failed is given back to the local store (CountStatus, a later mount), not
// to the shared one, which never counted it.
func TestFinishGivesALocalChargeBackToTheLocalStore(t *testing.T) {
	local := storeAt(epochMS)
	l := limittest.MustNew(errStore, limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true,
		FailureMode: limit.FailLocal, CountStatus: countFailures}, limit.WithLocalStore(local))
	ctx := context.Background()
	for i := range 5 {
		d, _ := l.Consume(ctx, "a")
		if !d.Allowed || d.Outcome != limit.OutcomeDegraded || d.Remaining != 1 {
			t.Fatalf("success %d: %+v; want admitted by the local store with 1 left (successes given back there)", i, d)
		}
		l.Finish(ctx, &d, 200)
	}
	for i := range 2 {
		d, _ := l.Consume(ctx, "a")
		if !d.Allowed {
			t.Fatalf("failure %d limited", i)
		}
		l.Finish(ctx, &d, 500)
	}
	if d, _ := l.Consume(ctx, "a"); d.Allowed {
		t.Fatal("admitted after 2 counted failures in the local store")
	}
}

// countFailures counts only the responses with status >= 400.
func countFailures(s int) bool { return s >= 400 }

// A policy that counts only failures: successes are charged before the
// handler and given back after it; a refund never revives a window that
// has rolled, and a panicking CountStatus counts the request.
func TestFinishCountStatus(t *testing.T) {
	s := storeAt(epochMS)
	rec := &limittest.Recorder{}
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, AlignWindows: true,
		CountStatus: countFailures}, limit.WithObserver(rec))
	ctx := context.Background()
	for i := range 10 {
		d, _ := l.Consume(ctx, "a")
		if !d.Allowed {
			t.Fatalf("success %d limited: successes must not count", i)
		}
		l.Finish(ctx, &d, 200)
	}
	for i := range 3 {
		d, _ := l.Consume(ctx, "a")
		if !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("failure %d: %+v", i, d)
		}
		l.Finish(ctx, &d, 401)
		l.Finish(ctx, &d, 200) // a second Finish does nothing
	}
	if d, _ := l.Consume(ctx, "a"); d.Allowed {
		t.Fatal("a 4th request after 3 failures was admitted")
	}

	// A charge in a window that has rolled is not given back to the next.
	d, _ := l.Consume(ctx, "b")
	s.advance(60_000)
	for range 3 {
		d2, _ := l.Consume(ctx, "b")
		if !d2.Allowed {
			t.Fatal("new window: limited")
		}
	}
	l.Finish(ctx, &d, 200)
	if d, _ := l.Consume(ctx, "b"); d.Allowed {
		t.Fatal("a refund of the previous window's charge gave quota to the new window")
	}

	// Status 0 (unknown) counts.
	d, _ = l.Consume(ctx, "c")
	l.Finish(ctx, &d, 0)
	if d, _ := l.Consume(ctx, "c"); d.Remaining != 1 {
		t.Fatalf("after an unknown status: remaining %d, want 1", d.Remaining)
	}

	// A panicking CountStatus counts the request and is reported.
	p := limittest.MustNew(s, limit.Policy{Name: "p", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute,
		CountStatus: func(int) bool { panic("boom") }}, limit.WithObserver(rec))
	d, _ = p.Consume(ctx, "a")
	p.Finish(ctx, &d, 200)
	if d, _ := p.Consume(ctx, "a"); d.Allowed {
		t.Fatal("a panicking CountStatus gave the charge back")
	}
	if rec.Issues(limit.Issue("hook-panic")) != 1 {
		t.Fatalf("IssueHookPanic reported %d times, want 1", rec.Issues(limit.Issue("hook-panic")))
	}

	// Finish with another Limiter's Decision does nothing.
	d, _ = l.Consume(ctx, "d")
	p.Finish(ctx, &d, 200)
	if d, _ := l.Consume(ctx, "d"); d.Remaining != 1 {
		t.Fatalf("a foreign Finish refunded: remaining %d", d.Remaining)
	}
}

// A handler that panics never reaches Finish: its request stays counted
// (a policy counting only failures counts it, as the 500 it becomes), and
// the panic reaches the server unchanged.
func TestFinishHandlerPanicStaysCounted(t *testing.T) {
	s := storeAt(epochMS)
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true,
		CountStatus: func(s int) bool { return s < 400 }})
	observe := func(w http.ResponseWriter, status *int) http.ResponseWriter { *status = 200; return w }
	h := l.HTTPHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }), nil, observe)
	for range 2 {
		func() {
			defer func() {
				if p := recover(); p != "handler bug" {
					t.Fatalf("recovered %v", p)
				}
			}()
			serveRec(h, "GET", "/x")
		}()
	}
	if w := serveRec(h, "GET", "/x"); w.Code != 429 {
		t.Fatalf("3rd request: %d; the panicking requests should stay counted", w.Code)
	}
}

// A refund gives the cost back to every quota of the plan that charged the
// request (several quotas and plans are one Op, so is the refund): after
// successes that do not count, each quota of each plan still holds its
// whole allowance; after failures, each quota shows them.
func TestFinishRefundsEveryQuotaOfThePlan(t *testing.T) {
	s := storeAt(epochMS)
	plan := func(r limit.Request) (string, error) {
		if id, _ := r.Native.(string); strings.HasPrefix(id, "pro-") {
			return "pro", nil
		}
		return "", nil
	}
	for _, a := range []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.TokenBucket} {
		t.Run(a.String(), func(t *testing.T) {
			l := limittest.MustNew(s, limit.Policy{Name: "q-" + a.String(), Algorithm: a, AlignWindows: a == limit.FixedWindow,
				Quotas:      []limit.Rate{{Limit: 3, Window: 10 * time.Second}, {Limit: 5, Window: time.Minute}},
				Plans:       map[string][]limit.Rate{"pro": {{Limit: 6, Window: 10 * time.Second}, {Limit: 9, Window: time.Minute}}},
				Plan:        plan,
				CountStatus: countFailures})
			ctx := context.Background()
			for _, tc := range []struct {
				id       string
				capacity int64 // of the tighter quota
			}{{"free", 3}, {"pro-1", 6}} {
				for i := range 20 {
					d, _ := l.Consume(ctx, tc.id)
					if !d.Allowed || d.Remaining != tc.capacity-1 {
						t.Fatalf("%s: success %d: allowed %v remaining %d; want admitted with %d left (every success given back)", tc.id, i, d.Allowed, d.Remaining, tc.capacity-1)
					}
					l.Finish(ctx, &d, 200)
				}
				for i := range tc.capacity {
					d, _ := l.Consume(ctx, tc.id)
					if !d.Allowed || d.Remaining != tc.capacity-1-i {
						t.Fatalf("%s: failure %d: allowed %v remaining %d, want %d", tc.id, i, d.Allowed, d.Remaining, tc.capacity-1-i)
					}
					l.Finish(ctx, &d, 500)
				}
				if d, _ := l.Consume(ctx, tc.id); d.Allowed {
					t.Fatalf("%s: admitted after %d counted failures", tc.id, tc.capacity)
				}
			}
		})
	}
}

// A token-bucket charge fades as the bucket refills: a request charged at
// t0 and settled (not counted) after the bucket has refilled past it must
// give back nothing, since nothing of it is left. TAT = max(TAT - cost*T,
// now) gave back a whole token from whatever later requests had taken: a
// client holding a slow request whose status does not count (its own
// successful sign-in, a slow upload) had one counted failure erased per
// such request, so a "3 failures per minute" policy admitted 6 in a minute
// (3 after the refill, 3 more once the 3 slow requests ended).
func TestTokenBucketLateRefundGivesBackOnlyWhatTheChargeStillHolds(t *testing.T) {
	s := storeAt(epochMS)
	l := limittest.MustNew(s, limit.Policy{Algorithm: limit.TokenBucket, Limit: 3, Window: time.Minute, CountStatus: countFailures})
	ctx := context.Background()
	var slow [3]limit.Decision
	for i := range slow {
		if slow[i], _ = l.Consume(ctx, "a"); !slow[i].Allowed {
			t.Fatalf("slow request %d limited", i)
		}
	}
	s.advance(60_000) // the bucket is full again: the slow requests' charges have faded
	for i := range 3 {
		if d, _ := l.Consume(ctx, "a"); !d.Allowed {
			t.Fatalf("failure %d limited on a full bucket", i)
		} else {
			l.Finish(ctx, &d, 401)
		}
	}
	for i := range slow {
		l.Finish(ctx, &slow[i], 200) // the slow requests end: successes, not counted
	}
	if d, _ := l.Consume(ctx, "a"); d.Allowed {
		t.Fatalf("a 4th failure within a moment was admitted (remaining %d): the late refunds gave back the failures' tokens", d.Remaining)
	}

	// Partly faded: d1 charged at t0 on a full bucket (TAT t0+20 s), d2 at
	// t0+15 s (TAT t0+40 s), d1 settled then: 5 s of it are left, a quarter
	// of a token, and only those are given back.
	s.advance(60_000)
	d1, _ := l.Consume(ctx, "b")
	s.advance(15_000)
	d2, _ := l.Consume(ctx, "b")
	l.Finish(ctx, &d2, 401)
	l.Finish(ctx, &d1, 200)
	// As if d1 had never been: d2 on a full bucket (TAT t0+35 s), the next
	// request to t0+55 s, 40 s from now. A whole token given back left
	// 25 s.
	if d, _ := l.Consume(ctx, "b"); !d.Allowed || d.ResetAfter != 40*time.Second {
		t.Fatalf("after a partly faded refund: allowed %v reset after %v, want admitted, whole again in 40s", d.Allowed, d.ResetAfter)
	}
}

// The flag of a limited request stays in its header map, and a header map
// can outlive the request: an in-process dispatcher (a batch endpoint that
// serves its sub-requests through the router on shallow copies of the
// request, a test harness reusing one http.Header) hands the same map to
// the next request. That request's mounts then found the flag set, and
// each gave its charge back: one limited sub-request made every later one
// in the batch free. A mount gives its charge back only for a flag set
// after it charged.
func TestLimitedFlagOfAnEarlierRequestRefundsNothing(t *testing.T) {
	s := storeAt(epochMS)
	global := limittest.MustNew(s, limit.Policy{Name: "global", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour})
	login := limittest.MustNew(s, limit.Policy{Name: "login", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour})
	h := stacked(global, login)
	batch := httptest.NewRequest("POST", "/batch", nil)
	batch.RemoteAddr = "192.0.2.1:4711"
	var got []int
	for _, path := range []string{"/login", "/login", "/a", "/b", "/c", "/d", "/e", "/f"} {
		sub := batch.WithContext(batch.Context()) // shares batch.Header
		sub.URL = &url.URL{Path: path}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, sub)
		got = append(got, w.Code)
	}
	// global: login 1 and /a-/d are charged (5); login 2 is limited by
	// login and charges neither.
	if want := []int{204, 429, 204, 204, 204, 204, 429, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sub-requests sharing one header map: %v, want %v", got, want)
	}
}

// Only a mount sets the flag: a field of that name that reached the header
// map some other way refunds nothing. Go's server and fasthttp refuse the
// name from a client, but not everything between a client and a mount
// does: a middleware that merges fields from an envelope (a batch body, a
// serverless event, a custom transport) into r.Header after the global
// mount charged made that mount give its charge back on every request.
func TestLimitedFlagFromOutsideRefundsNothing(t *testing.T) {
	s := storeAt(epochMS)
	global := limittest.MustNew(s, limit.Policy{Name: "global", Algorithm: limit.FixedWindow, Limit: 2, Window: time.Hour})
	h := global.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range map[string]string{"Quotagate limited": "1"} { // fields from the client's envelope
			r.Header[k] = []string{v}
		}
		w.WriteHeader(http.StatusNoContent)
	}), nil, nil)
	var got []int
	for range 4 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got = append(got, w.Code)
	}
	if want := []int{204, 204, 429, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests given a forged flag: %v, want %v", got, want)
	}
}
