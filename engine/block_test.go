package limit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// otpPolicy is the examples' otp policy: 3 per 5 s, fixed window, blocks
// of 8 s doubling up to 16 s.
func otpPolicy() limit.Policy {
	return limit.Policy{Name: "otp", Algorithm: limit.FixedWindow, Limit: 3, Window: 5 * time.Second, AlignWindows: true,
		BlockFor: 8 * time.Second, BlockMax: 16 * time.Second}
}

func TestBlockConstructionErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		p     limit.Policy
		field string
	}{
		{limit.Policy{BlockFor: -time.Second}, "BlockFor"},
		{limit.Policy{BlockFor: time.Second, BlockMax: -time.Second}, "BlockMax"},
		{limit.Policy{BlockMax: time.Second}, "BlockMax is set but BlockFor is 0"},
		{limit.Policy{BlockFor: 2 * time.Second, BlockMax: time.Second}, "BlockMax 1s is below BlockFor 2s"},
		{limit.Policy{BlockFor: time.Second + time.Microsecond}, "BlockFor"},
		{limit.Policy{BlockFor: time.Second, BlockMax: time.Second + time.Microsecond}, "BlockMax"},
		{limit.Policy{BlockFor: 181 * 24 * time.Hour}, "BlockFor 4344h0m0s exceeds the maximum"},
		{limit.Policy{BlockFor: time.Second, BlockMax: 181 * 24 * time.Hour}, "BlockMax 4344h0m0s exceeds the maximum"},
		{limit.Policy{Algorithm: limit.Concurrency, Limit: 1, BlockFor: 5 * time.Second}, "BlockFor (or BlockMax) is set, and Concurrency has no blocks"},
		{limit.Policy{Algorithm: limit.Concurrency, Limit: 1, BlockMax: -time.Second}, "BlockFor (or BlockMax)"},
		{limit.Policy{BlockFor: time.Second, CountStatus: failures, Lease: -time.Second}, "Lease -1s is negative"},
		{limit.Policy{BlockFor: time.Second, CountStatus: failures, Lease: 25 * time.Hour}, "Lease 25h0m0s is over the maximum"},
		{limit.Policy{BlockFor: time.Second, CountStatus: failures, Lease: time.Second + time.Microsecond}, "Lease 1.000001s is not a whole number"},
	} {
		_, err := limit.New(limittest.NewStore(nil), c.p)
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want ErrInvalidPolicy naming %q", c.p, err, c.field)
		}
	}
	// A store that does not decide blocks would ignore them.
	_, err := limit.New(ignoringStore{limittest.NewStore(nil)}, limit.Policy{BlockFor: time.Second})
	if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "BlockFor needs a store that decides blocks") {
		t.Errorf("BlockFor on a store without Info.Blocks: %v", err)
	}
	// Nor may FailLocal's local store ignore them: during an outage the
	// blocks would end.
	_, err = limit.New(limittest.NewStore(nil), limit.Policy{BlockFor: time.Second, FailureMode: limit.FailLocal},
		limit.WithLocalStore(ignoringStore{limittest.NewStore(nil)}))
	if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "BlockFor needs a store that decides blocks") || !strings.Contains(err.Error(), "WithLocalStore") {
		t.Errorf("BlockFor with a local store without Info.Blocks: %v", err)
	}
	if _, err := limit.New(limittest.NewStore(nil), limit.Policy{BlockFor: 180 * 24 * time.Hour, BlockMax: 180 * 24 * time.Hour}); err != nil {
		t.Errorf("the longest blocks: %v", err)
	}
}

// failures counts the failed responses only (Policy.CountStatus).
func failures(status int) bool { return status >= 400 }

// ignoringStore is a store that says nothing of blocks (no Describe).
type ignoringStore struct{ s *limittest.Store }

func (i ignoringStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = i.take(ctx, op)
	return err
}

func (i ignoringStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	return limittest.Take(ctx, i.s, op)
}

// TestBlockLastsBlockForThenDoubles: the request that finds the quota
// spent begins an 8 s block; every request during it is limited with the
// time left as RetryAfter (never early: rounded up to the ms), charged
// nothing; the block outlasts the window. A repeat offence while the first
// is remembered (until BlockMax after the block ends) blocks 16 s, and
// again 16 s (BlockMax); once forgotten, 8 s again.
func TestBlockLastsBlockForThenDoubles(t *testing.T) {
	s := storeAt(epochMS - epochMS%5000)
	l := limittest.MustNew(s, otpPolicy())
	ctx := context.Background()
	take := func() limit.Decision {
		t.Helper()
		d, err := l.Consume(ctx, "client")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	offend := func(want time.Duration) {
		t.Helper()
		for i := range 3 {
			if d := take(); !d.Allowed || d.Blocked {
				t.Fatalf("request %d: %+v", i+1, d)
			}
		}
		if d := take(); d.Allowed || !d.Blocked || d.RetryAfter != want || d.Outcome != limit.OutcomeLimited {
			t.Fatalf("the request that finds the quota spent: %+v, want blocked for %v", d, want)
		}
	}
	offend(8 * time.Second)
	s.advance(5000) // a new window: the quota is back, the block is not
	if d := take(); d.Allowed || !d.Blocked || d.RetryAfter != 3*time.Second || d.Remaining != 0 || d.ResetAfter < 3*time.Second {
		t.Fatalf("5 s into the block: %+v, want 3 s left, nothing remaining until then (the quota's own count aside)", d)
	}
	s.advance(2999)
	if d := take(); d.Allowed || !d.Blocked || d.RetryAfter != time.Millisecond {
		t.Fatalf("1 ms before the block ends: %+v", d)
	}
	s.advance(1) // 8 s: the block ends; requests during it were charged nothing
	s.advance(2000)
	offend(16 * time.Second) // within BlockMax of the end: a repeat offence
	s.advance(16_000 + 15_999)
	offend(16 * time.Second) // BlockMax
	s.advance(16_000 + 16_000)
	offend(8 * time.Second) // forgotten 16 s after the block ended
}

// TestBlockFollowsCountedRequestsOnly: with CountStatus counting failures,
// successes never block, however many; three failures spend the quota and
// the next request is blocked whatever its status would be.
func TestBlockFollowsCountedRequestsOnly(t *testing.T) {
	s := storeAt(epochMS)
	p := otpPolicy()
	p.CountStatus = func(status int) bool { return status >= 400 }
	l := limittest.MustNew(s, p)
	ctx := context.Background()
	for i := range 20 {
		d, _ := l.Consume(ctx, "client")
		if !d.Allowed || d.Blocked {
			t.Fatalf("success %d: %+v", i, d)
		}
		l.Finish(ctx, &d, 204)
	}
	for i := range 3 {
		d, _ := l.Consume(ctx, "client")
		if !d.Allowed {
			t.Fatalf("failure %d: %+v", i, d)
		}
		l.Finish(ctx, &d, 401)
	}
	d, _ := l.Consume(ctx, "client")
	if d.Allowed || !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("after 3 failures: %+v, want blocked 8 s", d)
	}
	l.Finish(ctx, &d, 204) // a limited request has nothing to give back
	s.advance(7000)
	if d, _ := l.Consume(ctx, "client"); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("7 s into the block: %+v", d)
	}
}

// TestBlockUnderShadow: Shadow decides and reports the block (Blocked,
// OutcomeShadowLimited, its RetryAfter) and enforces none.
func TestBlockUnderShadow(t *testing.T) {
	s := storeAt(epochMS)
	p := otpPolicy()
	p.Shadow = true
	rec := &limittest.Recorder{}
	l := limittest.MustNew(s, p, limit.WithObserver(rec))
	ctx := context.Background()
	for range 3 {
		l.Consume(ctx, "client")
	}
	for i, want := range []time.Duration{8 * time.Second, 7 * time.Second} {
		d, _ := l.Consume(ctx, "client")
		if !d.Allowed || !d.Blocked || d.Outcome != limit.OutcomeShadowLimited || d.RetryAfter != want {
			t.Fatalf("request %d past the quota: %+v, want admitted, blocked for %v", i, d, want)
		}
		if e := rec.Last(); !e.Blocked || e.Outcome != limit.OutcomeShadowLimited {
			t.Fatalf("event %+v", e)
		}
		s.advance(1000)
	}
}

// TestResetLiftsABlockAndPeekShowsIt: Peek reports the block in force (and
// the one a request past the quota would begin) without beginning one;
// Reset lifts it, and forgets the offence (the next block is BlockFor).
func TestResetLiftsABlockAndPeekShowsIt(t *testing.T) {
	s := storeAt(epochMS)
	l := limittest.MustNew(s, otpPolicy())
	ctx := context.Background()
	for range 3 {
		l.Consume(ctx, "client")
	}
	if d, err := l.Peek(ctx, "client"); err != nil || d.Allowed || !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("Peek of a spent quota: %+v, %v: want the block a request would begin", d, err)
	}
	s.advance(1000)
	if d, _ := l.Peek(ctx, "client"); !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("a second Peek: %+v: the first began no block", d)
	}
	l.Consume(ctx, "client") // begins it
	s.advance(2000)
	if d, _ := l.Peek(ctx, "client"); d.Allowed || !d.Blocked || d.RetryAfter != 6*time.Second || d.Identity() != "client" {
		t.Fatalf("Peek during the block: %+v", d)
	}
	if err := l.Reset(ctx, "client"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "client"); !d.Allowed || d.Blocked || d.Remaining != 2 {
		t.Fatalf("Peek after Reset: %+v", d)
	}
	for range 3 {
		l.Consume(ctx, "client")
	}
	if d, _ := l.Consume(ctx, "client"); !d.Blocked || d.RetryAfter != 8*time.Second {
		t.Fatalf("the offence after Reset: %+v, want a first block", d)
	}
}

// TestBlockStartLoggedOncePerBlock: the start of a block is logged once
// (not the requests during it), and at most once per 10 s per Limiter.
func TestBlockStartLoggedOncePerBlock(t *testing.T) {
	s := storeAt(epochMS)
	var log limittest.Log
	l := limittest.MustNew(s, otpPolicy(), limit.WithLogger(log.Logger()))
	ctx := context.Background()
	for range 10 {
		l.Consume(ctx, "a")
	}
	if n := log.Count("an identity is blocked"); n != 1 {
		t.Fatalf("%d block lines after one block, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "identity=a") || !strings.Contains(log.String(), "block=8s") {
		t.Fatalf("the line says neither the identity nor the block: %s", log.String())
	}
	for range 4 {
		l.Consume(ctx, "b")
	}
	if n := log.Count("an identity is blocked"); n != 1 {
		t.Fatalf("%d block lines after a second block within 10 s, want 1 (rate-limited)", n)
	}
}

// TestDenyCacheAnswersABlockedIdentity: behind a guard, the store is asked
// once for the request that begins the block and not again while it
// lasts; a Reset drops the cached denial.
func TestDenyCacheAnswersABlockedIdentity(t *testing.T) {
	s := storeAt(epochMS)
	g, err := guard.New(s.Store)
	if err != nil {
		t.Fatal(err)
	}
	l := limittest.MustNew(g, otpPolicy())
	ctx := context.Background()
	for range 4 {
		l.Consume(ctx, "client")
	}
	calls := s.Calls()
	for range 50 {
		if d, _ := l.Consume(ctx, "client"); d.Allowed || !d.Blocked || d.RetryAfter <= 0 || d.RetryAfter > 8*time.Second {
			t.Fatalf("a request during the block: %+v", d)
		}
	}
	if n := s.Calls() - calls; n != 0 {
		t.Fatalf("50 requests during the block made %d store calls, want 0", n)
	}
	if err := l.Reset(ctx, "client"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Consume(ctx, "client"); !d.Allowed {
		t.Fatalf("after Reset: %+v", d)
	}
}

// TestFallbackIsNeverBlocked: requests without an identity share the
// fallback bucket; it limits them, and never blocks them all.
func TestFallbackIsNeverBlocked(t *testing.T) {
	s := storeAt(epochMS)
	l := limittest.MustNew(s, otpPolicy())
	for range 5 {
		if d, _ := l.Consume(context.Background(), ""); d.Blocked {
			t.Fatalf("the fallback bucket blocked: %+v", d)
		}
	}
}

// TestPeekOfABlockUnderMaxWait: a request a block limits waits for no
// slot, so a Peek during the block is limited; once the block is over, a
// request that would reserve its slot within MaxWait begins no block, and
// its Peek is Allowed with the wait.
func TestPeekOfABlockUnderMaxWait(t *testing.T) {
	s := storeAt(epochMS)
	l := limittest.MustNew(s, limit.Policy{Name: "tb", Algorithm: limit.TokenBucket, Limit: 1, Window: 10 * time.Second, Burst: 1,
		MaxWait: time.Second, BlockFor: 5 * time.Second})
	ctx := context.Background()
	if d, _ := l.Consume(ctx, "c"); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	if d, _ := l.Consume(ctx, "c"); d.Allowed || !d.Blocked || d.RetryAfter != 10*time.Second {
		t.Fatalf("second, 10 s from its slot: %+v, want limited, blocked, Retry-After 10 s", d)
	}
	s.advance(1000)
	if d, _ := l.Peek(ctx, "c"); d.Allowed || !d.Blocked || d.RetryAfter != 9*time.Second {
		t.Fatalf("Peek during the block: %+v", d)
	}
	s.advance(8500) // the block ended at 5 s; the slot begins in 500 ms
	if d, _ := l.Peek(ctx, "c"); !d.Allowed || d.Blocked || d.Waited != 500*time.Millisecond {
		t.Fatalf("Peek of a request that would wait 500 ms: %+v", d)
	}
}

// TestBlockHeldOffBySuccessesInFlight: with CountStatus counting failures,
// successes in flight (charged at Check, given back at Finish) that fill
// the quota make the denial they cause begin no block, enforced, in
// Shadow and behind a deny cache; once they are given back, three
// failures spend the quota and the next request begins the block, which
// Shadow reports and does not enforce, and which the deny cache answers
// from then on without a store call.
func TestBlockHeldOffBySuccessesInFlight(t *testing.T) {
	for _, c := range []struct {
		name          string
		shadow, guard bool
	}{
		{"enforced", false, false},
		{"shadow", true, false},
		{"deny_cache", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := storeAt(epochMS - epochMS%5000)
			p := otpPolicy()
			p.CountStatus = func(status int) bool { return status >= 400 }
			p.Shadow = c.shadow
			var store limitstore.Store = s
			if c.guard {
				g, err := guard.New(s.Store)
				if err != nil {
					t.Fatal(err)
				}
				store = g
			}
			l := limittest.MustNew(store, p)
			ctx := context.Background()
			limited := func(d limit.Decision) bool {
				if c.shadow {
					return d.Allowed && d.Outcome == limit.OutcomeShadowLimited
				}
				return !d.Allowed && d.Outcome == limit.OutcomeLimited
			}
			var inFlight [3]limit.Decision
			for i := range inFlight {
				inFlight[i], _ = l.Consume(ctx, "client")
				if !inFlight[i].Allowed || inFlight[i].Outcome != limit.OutcomeAllowed {
					t.Fatalf("success %d: %+v", i+1, inFlight[i])
				}
			}
			for i := range 2 {
				if d, _ := l.Consume(ctx, "client"); !limited(d) || d.Blocked || d.RetryAfter != 5*time.Second {
					t.Fatalf("denial %d while 3 successes are in flight: %+v, want limited by the quota, no block", i+1, d)
				}
			}
			for i := range inFlight {
				l.Finish(ctx, &inFlight[i], 204)
			}
			for i := range 3 {
				d, _ := l.Consume(ctx, "client")
				if !d.Allowed || d.Outcome != limit.OutcomeAllowed {
					t.Fatalf("failure %d after the successes were given back: %+v", i+1, d)
				}
				l.Finish(ctx, &d, 401)
			}
			calls := s.Calls()
			if d, _ := l.Consume(ctx, "client"); !limited(d) || !d.Blocked || d.RetryAfter != 8*time.Second {
				t.Fatalf("the request after 3 failures: %+v, want it to begin a block of 8 s", d)
			}
			if c.guard {
				// The deny cache counts the block down on the real
				// clock, not the store's.
				if d, _ := l.Consume(ctx, "client"); !limited(d) || !d.Blocked || d.RetryAfter <= 7*time.Second || d.RetryAfter > 8*time.Second {
					t.Fatalf("the block's second request: %+v", d)
				}
				if n := s.Calls() - calls; n != 1 {
					t.Fatalf("the block's first and second requests made %d store calls, want 1 (the deny cache answers the second)", n)
				}
				return
			}
			s.advance(1000)
			if d, _ := l.Consume(ctx, "client"); !limited(d) || !d.Blocked || d.RetryAfter != 7*time.Second {
				t.Fatalf("1 s into the block: %+v", d)
			}
		})
	}
}

// The policies of one Name share an identity's record of unsettled
// charges, MaxWait or not, so they agree on its lease periods: a charge
// never finished counts no longer than twice Lease, and one in flight
// holds off the other policy's block.
func TestBlockLeasePeriodsOfOneNameAgree(t *testing.T) {
	s := storeAt(epochMS)
	p := limit.Policy{Name: "login", Algorithm: limit.TokenBucket, Limit: 1, Window: time.Minute,
		BlockFor: 10 * time.Second, CountStatus: failures, Lease: time.Second}
	a := limittest.MustNew(s, p)
	p.MaxWait = time.Second
	b, err := a.With(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, _ := a.Consume(ctx, "client"); !d.Allowed {
		t.Fatalf("a: %+v", d) // its handler panics: no Finish
	}
	s.advance(500)
	d, _ := b.Consume(ctx, "client")
	if !d.Allowed {
		t.Fatalf("b: %+v", d)
	}
	b.Finish(ctx, &d, 401)
	s.advance(3_600_000) // an hour: a's charge is long settled
	d, _ = b.Consume(ctx, "client")
	if !d.Allowed {
		t.Fatalf("b an hour later: %+v", d)
	}
	b.Finish(ctx, &d, 401)
	if d, _ := b.Consume(ctx, "client"); d.Allowed || !d.Blocked {
		t.Fatalf("counted denial an hour after the last unfinished charge: %+v, want a block", d)
	}

	s2 := storeAt(epochMS)
	p.MaxWait = 0
	a = limittest.MustNew(s2, p)
	p.MaxWait = time.Second
	if b, err = a.With(p); err != nil {
		t.Fatal(err)
	}
	inFlight, _ := b.Consume(ctx, "client")
	if !inFlight.Allowed {
		t.Fatalf("b: %+v", inFlight)
	}
	d, _ = a.Consume(ctx, "client")
	if !d.Allowed {
		t.Fatalf("a: %+v", d)
	}
	a.Finish(ctx, &d, 401)
	if d, _ := a.Consume(ctx, "client"); d.Blocked {
		t.Fatalf("denial while b's charge is in flight: %+v, want no block", d)
	}
}
