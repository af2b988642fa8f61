package limit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// TestPeekIsTheNextRequestsDecision: after every request of a sequence, a
// Peek at the same instant answers, field for field, what a cost-1 request
// then gets (on a twin Limiter and store driven alike), and writes nothing.
func TestPeekIsTheNextRequestsDecision(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			p := limit.Policy{Algorithm: alg, Quotas: []limit.Rate{{Limit: 3, Window: time.Second}, {Limit: 5, Window: 4 * time.Second}}}
			a, b := storeAt(epochMS), storeAt(epochMS)
			la, lb := mustNew(t, a, p), mustNew(t, b, p)
			for step := range 60 {
				d, err := la.Peek(ctx, "192.0.2.7")
				if err != nil {
					t.Fatal(err)
				}
				keys, calls := len(a.Keys()), a.Calls()
				want := check(lb, ctx, req("192.0.2.7:1", "/")).Decision
				if d.Allowed != want.Allowed || d.Outcome != want.Outcome || d.Remaining != want.Remaining || d.Limit != want.Limit ||
					d.ResetAfter != want.ResetAfter || d.RetryAfter != want.RetryAfter || !d.ResetAt.Equal(want.ResetAt) || d.Identity() != want.Identity() {
					t.Fatalf("step %d: Peek %+v\nrequest %+v", step, d, want)
				}
				if len(a.Keys()) != keys || a.Calls() != calls {
					t.Fatalf("step %d: Peek wrote", step)
				}
				check(la, ctx, req("192.0.2.7:1", "/"))
				a.advance(int64(step%7) * 90)
				b.advance(int64(step%7) * 90)
			}
		})
	}
}

// TestPeekWritesNothing: a Peek of a fresh identity creates no key and
// emits no Decision event; one of a used identity changes no state.
func TestPeekWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := storeAt(epochMS)
	rec := &limittest.Recorder{}
	l := mustNew(t, s, limit.Policy{Limit: 2, Window: time.Minute}, limit.WithObserver(rec))
	d, err := l.Peek(ctx, "198.51.100.1")
	if err != nil || !d.Allowed || d.Remaining != 1 || d.Cost != 1 {
		t.Fatalf("Peek = %+v, %v; want allowed, Remaining 1", d, err)
	}
	if len(s.Keys()) != 0 || len(rec.Decisions()) != 0 {
		t.Fatalf("Peek wrote %v, emitted %v", s.Keys(), rec.Decisions())
	}
	check(l, ctx, req("198.51.100.1:9", "/"))
	check(l, ctx, req("198.51.100.1:9", "/"))
	for range 3 {
		d, _ = l.Peek(ctx, "198.51.100.1")
	}
	if d.Allowed || d.Outcome != limit.OutcomeLimited || d.RetryAfter <= 0 {
		t.Fatalf("Peek after the quota = %+v; want limited with a Retry-After", d)
	}
	if got := check(l, ctx, req("198.51.100.1:9", "/")).Decision; got.Allowed {
		t.Fatal("the Peeks gave the quota back")
	}
	if n := len(rec.Decisions()); n != 3 {
		t.Fatalf("%d Decision events, want the 3 requests'", n)
	}
	if err := l.Reset(ctx, "198.51.100.1"); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range rec.Events() {
		if strings.HasPrefix(e, "duration ") {
			ops = append(ops, strings.TrimPrefix(e, "duration custom|"))
		}
	}
	if got := strings.Join(ops, " "); got != "peek take take peek peek peek take reset" {
		t.Fatalf("store durations by op: %s", got)
	}
}

// TestPeekAndResetIdentitySpellings: every spelling of one client address
// (port, brackets, zone, IPv4-mapped, another host of the /64, the /64
// itself) reaches the key its requests write; impossible identities are
// errors that say why.
func TestPeekAndResetIdentitySpellings(t *testing.T) {
	ctx := context.Background()
	s := storeAt(epochMS)
	l := mustNew(t, s, limit.Policy{Limit: 5, Window: time.Minute})
	d := check(l, ctx, req("[2001:db8::1]:443", "/")).Decision
	if d.Identity() != "2001:db8::" {
		t.Fatalf("Identity() = %q, want the /64's address", d.Identity())
	}
	for _, id := range []string{"2001:db8::1", "2001:db8::ff", "[2001:db8::1]:80", "2001:db8::1%eth0", "2001:db8::/64", "2001:DB8:0:0:1::", d.Identity()} {
		got, err := l.Peek(ctx, id)
		if err != nil || got.Remaining != 3 {
			t.Fatalf("Peek(%q) = Remaining %d, %v; want 3 (one request made)", id, got.Remaining, err)
		}
	}
	check(l, ctx, req("192.0.2.1:5", "/"))
	for _, id := range []string{"192.0.2.1", "192.0.2.1:8080", "::ffff:192.0.2.1", "[::ffff:192.0.2.1]:1", "192.0.2.1/32"} {
		if got, err := l.Peek(ctx, id); err != nil || got.Remaining != 3 {
			t.Fatalf("Peek(%q) = Remaining %d, %v; want 3", id, got.Remaining, err)
		}
	}
	for id, why := range map[string]string{
		"":                   "blank",
		"  ":                 "blank",
		"0.0.0.0":            "spelled like a client address",
		"0.0.0.0/32":         "unspecified",
		"::/128":             "unspecified",
		"2001:db8::/48":      "spans several identities",
		"192.0.2.0/24":       "spans several identities",
		"::ffff:1.2.3.0/120": "spans several identities",
		"300.1.2.3":          "spelled like a client address",
		"[2001:db8::1":       "spelled like a client address",
	} {
		_, err := l.Peek(ctx, id)
		if !errors.Is(err, limit.ErrInvalidIdentity) || !strings.Contains(err.Error(), why) {
			t.Errorf("Peek(%q) error %v; want ErrInvalidIdentity saying %q", id, err, why)
		}
		if err := l.Reset(ctx, id); !errors.Is(err, limit.ErrInvalidIdentity) {
			t.Errorf("Reset(%q) error %v; want ErrInvalidIdentity", id, err)
		}
	}
	// Loopback ::1 is in the /64 of zeros: its Identity() is "::", which
	// Peek and Reset take back (so does "::/64").
	lo := check(l, ctx, req("[::1]:50312", "/")).Decision
	for _, id := range []string{lo.Identity(), "::/64", "::1", "::", "::0"} {
		if got, err := l.Peek(ctx, id); err != nil || got.Remaining != 3 {
			t.Fatalf("Peek(%q) after a request from [::1] = Remaining %d, %v; want 3", id, got.Remaining, err)
		}
	}
	if err := l.Reset(ctx, lo.Identity()); err != nil {
		t.Fatalf("Reset(%q): %v", lo.Identity(), err)
	}
	if got, _ := l.Peek(ctx, "::1"); got.Remaining != 4 {
		t.Fatalf("Peek(::1) after Reset(%q) = Remaining %d, want 4", lo.Identity(), got.Remaining)
	}
	// Other text is a Consume identity on a policy without KeyFunc.
	if _, err := l.Consume(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Peek(ctx, "alice"); err != nil || got.Remaining != 3 || got.Identity() != "alice" {
		t.Fatalf("Peek(alice) = %+v, %v", got, err)
	}
	// With a KeyFunc, the identity is taken as it is, address or not.
	k := mustNew(t, s, limit.Policy{Name: "keyed", Limit: 5, Window: time.Minute, KeyFunc: func(r limit.Request) (string, error) { return strings.Join(r.Header.Values("K"), ""), nil }})
	r := req("192.0.2.9:1", "/")
	r.Header = headerOf("K: 10.0.0.1")
	if d := check(k, ctx, r).Decision; d.Identity() != "10.0.0.1" || d.KeySource != limit.KeySourceKeyFunc {
		t.Fatalf("KeyFunc decision identity %q from %s", d.Identity(), d.KeySource)
	}
	if got, _ := k.Peek(ctx, "10.0.0.1"); got.Remaining != 3 {
		t.Fatalf("KeyFunc Peek Remaining %d, want 3", got.Remaining)
	}
}

// TestResetForgetsEveryPlanAndQuota: Reset leaves no key of the identity
// in any plan, other identities keep theirs, and a second Reset is a
// no-op.
func TestResetForgetsEveryPlanAndQuota(t *testing.T) {
	ctx := context.Background()
	s := storeAt(epochMS)
	plan := "basic"
	p := limit.Policy{Name: "api", Quotas: []limit.Rate{{Limit: 2, Window: time.Second}, {Limit: 9, Window: time.Hour}},
		Plans: map[string][]limit.Rate{"pro": {{Limit: 3, Window: time.Second}}},
		Plan:  func(limit.Request) (string, error) { return plan, nil }, KeyFunc: func(r limit.Request) (string, error) { return r.Path, nil }}
	l := mustNew(t, s, p)
	for _, pl := range []string{"basic", "pro"} {
		plan = pl
		for range 4 {
			check(l, ctx, req("192.0.2.1:1", "/alice"))
			check(l, ctx, req("192.0.2.1:1", "/bob"))
		}
	}
	if n := len(s.Keys()); n != 6 {
		t.Fatalf("%d keys, want 6 (3 quotas x 2 identities)", n)
	}
	for range 2 {
		if err := l.Reset(ctx, "/alice"); err != nil {
			t.Fatal(err)
		}
	}
	for _, pl := range []string{"basic", "pro"} {
		plan = pl
		if d := check(l, ctx, req("192.0.2.1:1", "/alice")).Decision; !d.Allowed || d.Remaining != 1 && d.Remaining != 2 {
			t.Fatalf("plan %s after Reset: %+v", pl, d)
		}
		if d := check(l, ctx, req("192.0.2.1:1", "/bob")).Decision; d.Allowed {
			t.Fatalf("plan %s: Reset of alice gave bob back his quota", pl)
		}
	}
}

// TestPeekAndResetOnAFailingStore: the store's error, whatever the
// FailureMode, and within the guard's timeout on a store that hangs.
func TestPeekAndResetOnAFailingStore(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailClosed} {
		l := mustNew(t, errStore, limit.Policy{FailureMode: mode})
		if _, err := l.Peek(ctx, "192.0.2.1"); !errors.Is(err, errBackend) {
			t.Errorf("%v: Peek error %v, want the store's", mode, err)
		}
		if err := l.Reset(ctx, "192.0.2.1"); !errors.Is(err, errBackend) {
			t.Errorf("%v: Reset error %v, want the store's", mode, err)
		}
	}
	l := mustNew(t, panickingStore, limit.Policy{})
	if _, err := l.Peek(ctx, "192.0.2.1"); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("Peek on a panicking store: %v", err)
	}
	if err := l.Reset(ctx, "192.0.2.1"); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("Reset on a panicking store: %v", err)
	}
	g, err := guard.New(hangStore, guard.WithTimeout(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hl := mustNew(t, g, limit.Policy{})
	for name, f := range map[string]func() error{
		"Peek":  func() error { _, err := hl.Peek(ctx, "192.0.2.1"); return err },
		"Reset": func() error { return hl.Reset(ctx, "192.0.2.1") },
	} {
		start := time.Now()
		if err := f(); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, limitstore.ErrCircuitOpen) {
			t.Errorf("%s on a hung store: %v", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s on a hung store took %v", name, d)
		}
	}
}

// TestPeekAndResetNeedOneBucketAndAResetter: a PerRoute policy without a
// Name, and a store without Reset, are errors.ErrUnsupported.
func TestPeekAndResetNeedOneBucketAndAResetter(t *testing.T) {
	ctx := context.Background()
	l := mustNew(t, storeAt(epochMS), limit.Policy{Scope: limit.PerRoute})
	if _, err := l.Peek(ctx, "192.0.2.1"); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "Name") {
		t.Errorf("PerRoute Peek: %v", err)
	}
	l = mustNew(t, takeOnly{storeAt(epochMS)}, limit.Policy{})
	if err := l.Reset(ctx, "192.0.2.1"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reset on a Take-only store: %v", err)
	}
	if _, err := l.Peek(ctx, "192.0.2.1"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Peek on a Take-only store: %v", err)
	}
}

// A FailLocal policy whose local store cannot forget: Reset forgets the
// identity on the primary and says that the local store kept its counts
// (they would limit the identity in the next outage), instead of nil.
func TestResetSaysWhenTheLocalStoreCannotForget(t *testing.T) {
	ctx := context.Background()
	primary, local := storeAt(epochMS), storeAt(epochMS)
	l := mustNew(t, primary, limit.Policy{Limit: 2, FailureMode: limit.FailLocal}, limit.WithLocalStore(takeOnly{local}))
	if _, err := l.Consume(ctx, "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	err := l.Reset(ctx, "192.0.2.1")
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithLocalStore") {
		t.Errorf("Reset: %v, want ErrUnsupported naming WithLocalStore", err)
	}
	if d, err := l.Peek(ctx, "192.0.2.1"); err != nil || d.Remaining != 1 {
		t.Errorf("after Reset: Peek %+v, %v; want the primary forgotten (a fresh request leaves 1)", d, err)
	}
}

// A Plan over an adapter's request type cannot read an identity: Peek
// answers for the default plan and reports no native-mismatch issue (it
// is a look, not a request).
func TestPeekWithARequestTypedPlanIsQuiet(t *testing.T) {
	obs := &limittest.Recorder{}
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 5, Window: time.Minute,
		Plans: map[string][]limit.Rate{"pro": {{Limit: 20, Window: time.Minute}}},
		Plan:  limit.PlanFuncOf(func(r *http.Request) (string, error) { return "pro", nil })}, limit.WithObserver(obs))
	d, err := l.Peek(context.Background(), "pro-1")
	if err != nil || d.Limit != 5 {
		t.Fatalf("Peek = %+v, %v; want the default plan's limit 5", d, err)
	}
	if n := obs.Issues(limit.Issue("native-mismatch")); n != 0 {
		t.Errorf("Peek reported %d native-mismatch issues, want 0", n)
	}
}

// Under MaxWait, Peek answers what the next request would get: admitted
// after waiting for its slot when the slot is within MaxWait and the
// caller's deadline, limited otherwise.
func TestPeekUnderMaxWaitSaysTheRequestWouldWait(t *testing.T) {
	ctx := context.Background()
	l := mustNew(t, storeAt(epochMS), limit.Policy{Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second})
	if _, err := l.Consume(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	d, err := l.Peek(ctx, "u")
	if err != nil || !d.Allowed || d.Outcome != limit.OutcomeAllowed || d.Waited != 200*time.Millisecond || d.RetryAfter != 0 {
		t.Fatalf("Peek = %+v, %v; want Allowed after a 200ms wait", d, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if d, err := l.Peek(short, "u"); err != nil || d.Allowed || d.RetryAfter != 200*time.Millisecond {
		t.Fatalf("Peek with a 100ms deadline = %+v, %v; want limited, RetryAfter 200ms", d, err)
	}
}

// takeOnly hides every method of its store but Take.
type takeOnly struct{ s *clockStore }

func (t takeOnly) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = t.take(ctx, op)
	return err
}

func (t takeOnly) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	return limittest.Take(ctx, t.s, op)
}
