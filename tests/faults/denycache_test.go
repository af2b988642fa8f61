package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// scriptCalls is how many script calls (EVALSHA) the server has run.
func scriptCalls(t *testing.T, srv *redisfault.Server) int64 {
	t.Helper()
	info, err := srv.Command(5*time.Second, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := redisfault.InfoField(info, "cmdstat_evalsha")
	if !ok {
		return 0
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, err := strconv.ParseInt(calls, 10, 64)
	if err != nil {
		t.Fatalf("cmdstat_evalsha %q: %v", v, err)
	}
	return n
}

// charges is how many state writes (SET and SETRANGE, the commands the
// store's scripts run for an admitted decision, INFO commandstats) the
// server has run: one per admitted one-quota decision, whether its call
// carried it alone or in a batch (group commit).
func charges(t *testing.T, srv *redisfault.Server) int64 {
	t.Helper()
	info, err := srv.Command(5*time.Second, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, cmd := range []string{"cmdstat_set", "cmdstat_setrange"} {
		v, ok := redisfault.InfoField(info, cmd)
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", cmd, v, err)
		}
		n += c
	}
	return n
}

// The deny cache across two replicas (two limiters, each on its own
// rueidis client, one real Redis on server time): an identity exhausted
// through replica A is then denied by A from its cache, with Remaining 0 and
// a Retry-After counting down, without a script call; replica B's own
// decisions stay exact (it asks Redis); once T passes, A asks Redis again
// and is admitted.
func TestDenyCacheAcrossReplicas(t *testing.T) {
	srv := redisfault.Start(t)
	logA, logB := newBreakerLog(), newBreakerLog()
	// A generous timeout: a loaded machine must not turn a late answer into
	// FailOpen's admission here (the timeout has tests of its own).
	storeA := newStore(t, srv.URL(), redisstore.WithObserver(logA), redisstore.WithTimeout(5*time.Second))
	storeB := newStore(t, srv.URL(), redisstore.WithObserver(logB), redisstore.WithTimeout(5*time.Second))
	pfx := prefix(t)
	p := limit.Policy{Name: "deny", Algorithm: limit.FixedWindow, Limit: 5, Window: 2 * time.Second}
	a, err := limit.New(storeA, p, pfx, limit.WithObserver(logA))
	if err != nil {
		t.Fatal(err)
	}
	b, err := limit.New(storeB, p, pfx, limit.WithObserver(logB))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var denial limit.Decision
	for i := range 6 {
		d, err := a.Consume(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if i < 5 != d.Allowed {
			t.Fatalf("call %d through A: allowed %v", i, d.Allowed)
		}
		denial = d
	}
	deniedAt := time.Now()
	before := scriptCalls(t, srv)
	prev := denial.RetryAfter
	for i := range 50 {
		d, err := a.Consume(ctx, "x")
		if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter > prev || d.RetryAfter <= 0 {
			t.Fatalf("cached call %d through A: %+v %v; want limited, Remaining 0, RetryAfter counting down from %v", i, d, err, prev)
		}
		prev = d.RetryAfter
	}
	if n := scriptCalls(t, srv) - before; n != 0 || logA.skips("deny-cache") != 50 {
		t.Fatalf("%d script calls and %d cache answers for 50 denied calls through A; want 0 and 50", n, logA.skips("deny-cache"))
	}
	// B asks Redis: exact for its own identities, and denied for x (then
	// from its own cache).
	for i := range 6 {
		if d, err := b.Consume(ctx, "y"); err != nil || i < 5 != d.Allowed {
			t.Fatalf("call %d for y through B: allowed %v, %v; want exactly 5 admitted", i, d.Allowed, err)
		}
	}
	before = scriptCalls(t, srv)
	admitted := 0
	for range 3 {
		d, err := b.Consume(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if time.Now().Before(deniedAt.Add(denial.RetryAfter)) {
		if admitted != 0 {
			t.Fatal("B admitted x, exhausted through A")
		}
		if n := scriptCalls(t, srv) - before; n != 1 {
			t.Fatalf("B made %d script calls for 3 denied calls, want 1 (then its own cache)", n)
		}
	} else {
		t.Log("x's denial ended before B's calls did (a loaded machine): B's checks of x skipped")
	}
	// When T passes, A asks Redis and is admitted.
	time.Sleep(time.Until(deniedAt.Add(denial.RetryAfter)))
	before = scriptCalls(t, srv)
	if d, err := a.Consume(ctx, "x"); err != nil || !d.Allowed {
		t.Fatalf("through A at T: %+v %v; want admitted", d, err)
	}
	if n := scriptCalls(t, srv) - before; n != 1 {
		t.Fatalf("%d script calls at T, want 1", n)
	}
	t.Logf("Retry-After %v from Redis; 50 denials from A's cache without a script call; B exact; admitted at T", denial.RetryAfter)
}

// What a timed-out call did in Redis: its command was on the wire
// to a frozen server, which runs it when it resumes, so it is charged
// although the failure mode decided (here FailClosed refused it: its client
// paid for nothing). The circuit breaker bounds that to the calls in flight
// when the store went silent: the calls it skipped never reach Redis and
// charge nothing. Both are counted as store errors.
//
// Whether a timed-out call was written to the socket before its deadline
// depends on scheduling (under -race on a loaded machine some are dropped
// by the client unsent; with group commit, calls queued behind the ones in
// flight are never sent when their deadline passes first, and queued calls
// sent together share one script call), so the test counts the charges the
// server made (the state writes, INFO commandstats) and wants exactly those
// charged: at least one of the timed-out calls, none of the skipped ones.
func TestTimedOutCallsAreChargedWhenRedisResumes(t *testing.T) {
	srv := redisfault.Start(t)
	log := newBreakerLog()
	store := newStore(t, srv.URL(), redisstore.WithObserver(log))
	const quota = 100
	lim, err := limit.New(store, limit.Policy{Name: "acct", Algorithm: limit.FixedWindow, Limit: quota, Window: 24 * time.Hour, FailureMode: limit.FailClosed},
		prefix(t), limit.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.Consume(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	// Whether any of the 10 calls gets on the wire before its deadline is
	// up to scheduling (about one run in ten on an idle 2-core machine puts
	// none there, on this code and before it): so up to 3 freezes, each on
	// its own identity. Every one must charge exactly what reached Redis
	// and nothing skipped; at least one must show a timed-out call charged.
	for attempt := 1; ; attempt++ {
		onWire := freezeAndCount(t, srv, lim, log, fmt.Sprintf("x%d", attempt), quota)
		if onWire > 0 {
			break
		}
		if attempt == 3 {
			t.Fatalf("in 3 freezes none of the 10 timed-out calls reached Redis; want at least one charged when it resumes")
		}
		t.Logf("freeze %d: none of the timed-out calls was on the wire; again", attempt)
	}
}

// freezeAndCount freezes Redis under 10 concurrent calls for id (they time
// out, the breaker opens), makes 10 more (skipped by the breaker), thaws it,
// waits for an answer, and checks that Redis charged exactly the calls that
// reached it: none of the skipped ones, Remaining quota minus those. It
// returns how many of the timed-out calls were on the wire.
func freezeAndCount(t *testing.T, srv *redisfault.Server, lim *limit.Limiter, log *breakerLog, id string, quota int64) int64 {
	t.Helper()
	ctx := context.Background()
	ran := charges(t, srv)
	skippedBefore := log.skips("breaker-open")
	srv.Freeze()
	var wg sync.WaitGroup
	var timedOut, skipped [10]error
	for i := range timedOut {
		wg.Go(func() { _, timedOut[i] = lim.Consume(ctx, id) })
	}
	wg.Wait()
	for i := range skipped {
		_, skipped[i] = lim.Consume(ctx, id)
	}
	srv.Thaw()
	for i := range 10 {
		if !errors.Is(timedOut[i], context.DeadlineExceeded) || errors.Is(timedOut[i], limitstore.ErrCircuitOpen) {
			t.Fatalf("call %d in flight when Redis froze: %v, want a timeout", i, timedOut[i])
		}
		if !errors.Is(skipped[i], limitstore.ErrCircuitOpen) {
			t.Fatalf("call %d after the breaker opened: %v, want ErrCircuitOpen", i, skipped[i])
		}
	}
	// Once the breaker lets calls through again, Redis shows what it was
	// charged.
	var d limit.Decision
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err = lim.Consume(ctx, id)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // waiting for the breaker's next probe
	}
	if err != nil {
		t.Fatalf("Redis did not answer within 5 s of SIGCONT: %v", err)
	}
	ran = charges(t, srv) - ran // the timed-out calls that reached Redis, any probe, and this call
	if ran < 1 || ran > 10+1 {
		t.Fatalf("Redis charged x %d times after the freeze; want 1..11: the timed-out calls that reached it, none of the 10 skipped, and this one", ran)
	}
	if want := quota - ran; d.Remaining != want {
		t.Fatalf("Remaining %d after %d charges reached Redis (timed-out calls and this one); want %d: every call that reached Redis charged, the skipped ones not", d.Remaining, ran, want)
	}
	if s := log.skips("breaker-open") - skippedBefore; s < 10 {
		t.Fatalf("%d calls skipped by the breaker, want at least 10", s)
	}
	t.Logf("10 calls timed out against a frozen Redis; the %d that were on the wire were charged when it resumed (Remaining %d of %d); 10 skipped by the open breaker were not", ran-1, d.Remaining, quota)
	return ran - 1
}

// limit.New on a Redis store at a closed port with a local store but
// without FailLocal used to fail open silently (4 of Limit 2 admitted).
// New refuses it, naming WithLocalStore and FailLocal; with FailLocal the
// local store limits: exactly 2 of 4.
func TestLocalStoreWithoutFailLocalIsRefused(t *testing.T) {
	closed := "redis://127.0.0.1:" + strconv.Itoa(redisfault.FreePort(t))
	store, err := redisstore.NewFromURL(closed)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	_, err = limit.New(store, limit.Policy{Limit: 2}, limit.WithKeyPrefix("faillocal"), limit.WithLocalStore(mem))
	if !errors.Is(err, limit.ErrInvalidOption) || !strings.Contains(err.Error(), "WithLocalStore") || !strings.Contains(err.Error(), "FailLocal") {
		t.Fatalf("New: %v; want ErrInvalidOption naming WithLocalStore and FailLocal", err)
	}
	lim, err := limit.New(store, limit.Policy{Limit: 2, FailureMode: limit.FailLocal}, limit.WithKeyPrefix("faillocal"), limit.WithLocalStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 4 {
		if d, _ := lim.Consume(context.Background(), "c"); d.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("%d of 4 admitted with Redis down under FailLocal, want 2", admitted)
	}
}
