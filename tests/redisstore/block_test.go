package redisstore_test

import (
	"context"
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// TestBlocksAgainstTheReferenceModels: limittest.CheckBlocks (random
// sequences of ConsumeN, Peek and Reset under policies that block, several
// quotas and plans, compared field by field with brute-force models) on
// miniredis, a real server and the Cluster, with an injected clock: on the
// real servers an hour ahead of real time and never falling behind it
// (limittest.RealTimeFloor), so that no key dies in Redis before the clock
// says its state is dead.
func TestBlocksAgainstTheReferenceModels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		start := int64(1_767_225_600_000)
		if be.real {
			start = time.Now().Add(time.Hour).UnixMilli()
		}
		var now atomic.Int64
		now.Store(start)
		s, err := New(client, WithTimeout(10*time.Second), WithClock(func() time.Time { return time.UnixMilli(now.Load()) }))
		if err != nil {
			t.Fatal(err)
		}
		rounds := 24
		if be.real {
			rounds = 12
		}
		set, scale := func(ms int64) int64 { now.Store(ms); return ms }, int64(1)
		if be.real {
			set, scale = limittest.RealTimeFloor(now.Store), 50
		}
		limittest.CheckBlocks(t, s, limittest.BlockRun{Start: start, Set: set, Seed: 3, Rounds: rounds, Scale: scale,
			Options: []limit.Option{limit.WithKeyPrefix(prefix)}})
		// Every key, the block records' included, has a deadline.
		for _, k := range scanKeys(t, client, prefix) {
			if p := pttl(t, client, k); p == -1 {
				t.Errorf("key %s has no deadline (PTTL %d)", k, p)
			}
		}
	})
}

// TestBlockSeenBySecondReplica: two Stores on one Redis (two replicas of a
// service, the server's clock, each with its own deny cache). The requests
// that spend the quota and begin the block go through the first; the
// second's first request is limited by the block (the store's word, with
// the block's Retry-After), and from then on its deny cache answers: its
// further requests run no command on the server (INFO commandstats). A
// Reset through the first lifts the block for both: the second's deny
// cache drops it when the Reset is announced.
func TestBlockSeenBySecondReplica(t *testing.T) {
	run := func(t *testing.T, be *backend, addrs []string) {
		nodes := make([]rueidis.Client, len(addrs))
		for i, a := range addrs {
			nodes[i] = nodeClient(t, a)
		}
		ctx := context.Background()
		prefix := testPrefix(t)
		p := limit.Policy{Name: "otp", Algorithm: limit.FixedWindow, Limit: 3, Window: 5 * time.Second,
			BlockFor: 8 * time.Second, BlockMax: 16 * time.Second}
		c1 := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, c1, prefix) })
		s1, s2 := newStore(t, be), newStore(t, be)
		l1 := limittest.MustNew(s1, p, limit.WithKeyPrefix(prefix))
		l2 := limittest.MustNew(s2, p, limit.WithKeyPrefix(prefix))
		for i := range 4 {
			d, err := l1.Consume(ctx, "client")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != (i < 3) || d.Blocked != (i == 3) {
				t.Fatalf("request %d on the first replica: %+v", i+1, d)
			}
		}
		d, err := l2.Consume(ctx, "client")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || !d.Blocked || d.RetryAfter <= 6*time.Second || d.RetryAfter > 8*time.Second {
			t.Fatalf("first request on the second replica: %+v, want blocked with a Retry-After near 8 s", d)
		}
		before := commandCalls(t, nodes)
		for range 20 {
			d, err := l2.Consume(ctx, "client")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || !d.Blocked || d.RetryAfter <= 0 {
				t.Fatalf("a later request on the second replica: %+v, want blocked", d)
			}
		}
		after := commandCalls(t, nodes)
		for cmd, n := range after {
			if cmd != "info" && n != before[cmd] {
				t.Errorf("20 blocked requests on the second replica ran %s %d times on the server, want none (its deny cache answers)", cmd, n-before[cmd])
			}
		}
		if err := l1.Reset(ctx, "client"); err != nil {
			t.Fatal(err)
		}
		if d, err := l1.Peek(ctx, "client"); err != nil || !d.Allowed || d.Blocked || d.Remaining != 2 {
			t.Fatalf("Peek after the Reset: %+v, %v: want a whole quota and no block", d, err)
		}
		for _, k := range scanKeys(t, c1, prefix) { // the block record deleted, the quota's of the next epoch
			if v := storedValue(t, c1, k); len(v) != 6 || v[1] != 0 || v[5] != 1 {
				t.Fatalf("key %s after the Reset: %v, want the empty state of epoch 1", k, v)
			}
		}
		// The second replica's deny cache held the block; the Reset's
		// announcement ends it there too, long before the block would.
		lifted := time.Now()
		for {
			d, err := l2.Consume(ctx, "client")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				break
			}
			if time.Since(lifted) > 2*time.Second {
				t.Fatalf("the second replica still limits the client 2 s after the Reset: %+v", d)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("the second replica admitted the client %v after the Reset", time.Since(lifted))
	}
	t.Run("standalone", func(t *testing.T) {
		be := standaloneBackend(t)
		opt, _ := ParseURL(skipNoEnv(t, envURL, "real standalone Redis"))
		run(t, be, opt.InitAddress)
	})
	t.Run("cluster", func(t *testing.T) {
		be := clusterBackend(t)
		run(t, be, strings.Split(skipNoEnv(t, envCluster, "real Redis Cluster"), ","))
	})
}

// TestBlockedPeekWritesNothingOnTheServer: on a real server, Peeks of a
// blocked identity and of one whose next request would begin a block leave
// every key as it was (values byte for byte, PTTLs only counting down) and
// run no write command (INFO commandstats).
func TestBlockedPeekWritesNothingOnTheServer(t *testing.T) {
	run := func(t *testing.T, be *backend, addrs []string) {
		nodes := make([]rueidis.Client, len(addrs))
		for i, a := range addrs {
			nodes[i] = nodeClient(t, a)
		}
		ctx := context.Background()
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		l := limittest.MustNew(newStore(t, be), limit.Policy{Name: "otp", Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute,
			BlockFor: time.Minute, BlockMax: 4 * time.Minute}, limit.WithKeyPrefix(prefix))
		for range 3 {
			l.Consume(ctx, "blocked")
		}
		for range 2 {
			l.Consume(ctx, "spent")
		}
		type snap struct {
			val  string
			pttl int64
		}
		read := func() map[string]snap {
			m := map[string]snap{}
			for _, k := range scanKeys(t, client, prefix) {
				v, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				m[k] = snap{v, pttl(t, client, k)}
			}
			return m
		}
		before := read()
		if len(before) != 3 { // two quota keys, one block record
			t.Fatalf("%d keys after the requests, want 3: %v", len(before), before)
		}
		calls := commandCalls(t, nodes)
		for range 5 {
			if d, err := l.Peek(ctx, "blocked"); err != nil || !d.Blocked || d.Allowed {
				t.Fatalf("Peek of the blocked identity: %+v, %v", d, err)
			}
			if d, err := l.Peek(ctx, "spent"); err != nil || !d.Blocked || d.RetryAfter != time.Minute {
				t.Fatalf("Peek of the spent identity: %+v, %v: want the block its next request begins", d, err)
			}
		}
		after := read()
		for k, b := range before {
			if a, ok := after[k]; !ok || a.val != b.val || a.pttl > b.pttl {
				t.Errorf("key %s: %+v before the Peeks, %+v (present %v) after", k, b, a, ok)
			}
		}
		if len(after) != len(before) {
			t.Errorf("%d keys after the Peeks, %d before", len(after), len(before))
		}
		now := commandCalls(t, nodes)
		for _, cmd := range []string{"set", "setrange", "del", "pexpire", "pexpireat", "expire"} {
			if n := now[cmd] - calls[cmd]; n != 0 {
				t.Errorf("the Peeks ran %s %d times", cmd, n)
			}
		}
	}
	t.Run("standalone", func(t *testing.T) {
		be := standaloneBackend(t)
		opt, _ := ParseURL(skipNoEnv(t, envURL, "real standalone Redis"))
		run(t, be, opt.InitAddress)
	})
	t.Run("cluster", func(t *testing.T) {
		be := clusterBackend(t)
		run(t, be, strings.Split(skipNoEnv(t, envCluster, "real Redis Cluster"), ","))
	})
}

// TestUnsettledChargesHoldOffBlocks: limittest.CheckUnsettledCharges (a
// policy counting only failures: successes in flight, concurrent ones
// included, never begin a block; failures that spend the quota do; a lost
// charge counts once its lease ends) on miniredis, a real server and the
// Cluster, at exact instants of an injected clock, without the deny cache
// (it counts down on the real clock). Afterwards every key, the unsettled
// charges' included, has a deadline.
func TestUnsettledChargesHoldOffBlocks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		start := time.Now().Add(time.Hour).UnixMilli()
		var now atomic.Int64
		now.Store(start)
		s, err := New(client, WithTimeout(10*time.Second), WithoutGuard(), WithClock(func() time.Time { return time.UnixMilli(now.Load()) }))
		if err != nil {
			t.Fatal(err)
		}
		limittest.CheckUnsettledCharges(t, s, limittest.BlockRun{Start: start, Set: func(ms int64) int64 { now.Store(ms); return ms },
			Options: []limit.Option{limit.WithKeyPrefix(prefix)}})
		pending := 0
		for _, k := range scanKeys(t, client, prefix) {
			if strings.Contains(k, ":pending:") {
				pending++
			}
			if p := pttl(t, client, k); be.real && p == -1 {
				t.Errorf("key %s has no deadline (PTTL %d)", k, p)
			}
		}
		if pending != 3 {
			t.Errorf("%d keys of unsettled charges, want 3 (one per identity)", pending)
		}
	})
}

// TestUnsettledChargesOnTheServerClock: on real servers with the server's
// TIME (the default), successes in flight make a denial that begins no
// block, failures then begin one, and the key of the unsettled charges
// lives no longer than the end of the lease period after the last charge
// (SET ... PXAT: at most twice the Lease of 2 s).
func TestUnsettledChargesOnTheServerClock(t *testing.T) {
	run := func(t *testing.T, be *backend) {
		ctx := context.Background()
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		p := limittest.PendingPolicy()
		p.Window = time.Minute // no window ends during the test
		l := limittest.MustNew(newStore(t, be, WithoutGuard()), p, limit.WithKeyPrefix(prefix))
		var inFlight [3]limit.Decision
		for i := range inFlight {
			var err error
			if inFlight[i], err = l.Consume(ctx, "client"); err != nil || !inFlight[i].Allowed {
				t.Fatalf("success %d: %+v, %v", i+1, inFlight[i], err)
			}
		}
		if d, err := l.Consume(ctx, "client"); err != nil || d.Allowed || d.Blocked {
			t.Fatalf("a denial while 3 successes are in flight: %+v, %v: want no block", d, err)
		}
		for i := range inFlight {
			l.Finish(ctx, &inFlight[i], 204)
		}
		for i := range 3 {
			d, err := l.Consume(ctx, "client")
			if err != nil || !d.Allowed {
				t.Fatalf("failure %d: %+v, %v", i+1, d, err)
			}
			l.Finish(ctx, &d, 401)
		}
		if d, err := l.Consume(ctx, "client"); err != nil || d.Allowed || !d.Blocked {
			t.Fatalf("the request after 3 failures: %+v, %v: want a block", d, err)
		}
		seen := false
		for _, k := range scanKeys(t, client, prefix) {
			p := pttl(t, client, k)
			if p <= 0 {
				t.Errorf("key %s: PTTL %d, want a deadline", k, p)
			}
			if strings.Contains(k, ":pending:") {
				if seen = true; p > 4000 {
					t.Errorf("the unsettled charges' key %s lives %d ms more, want at most 4000 (twice the Lease)", k, p)
				}
				// lease period, its charges, the period before's: every
				// charge settled
				v, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString()
				if err != nil || len(v) != 24 || binary.LittleEndian.Uint64([]byte(v[8:16])) != 0 || binary.LittleEndian.Uint64([]byte(v[16:24])) != 0 {
					t.Errorf("the unsettled charges after every Finish: %q (%v), want 24 bytes, none left", v, err)
				}
			}
		}
		if !seen {
			t.Error("no key of unsettled charges")
		}
	}
	t.Run("standalone", func(t *testing.T) { run(t, standaloneBackend(t)) })
	t.Run("cluster", func(t *testing.T) { run(t, clusterBackend(t)) })
}
