package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// TestPeekWritesNothingOnTheServer: on a real server, Peeks of a used and
// of a fresh identity leave every key as it was (the same keys, values
// byte for byte, PTTLs only counting down) and run no write command
// (INFO commandstats: no SET, SETRANGE, DEL, EXPIRE of any kind); a Reset
// is one script call, after which the identity's keys hold the empty state
// of the next epoch, their PTTLs kept, and no key is deleted.
func TestPeekWritesNothingOnTheServer(t *testing.T) {
	run := func(t *testing.T, be *backend, addrs []string) {
		nodes := make([]rueidis.Client, len(addrs))
		for i, a := range addrs {
			nodes[i] = nodeClient(t, a)
		}
		ctx := context.Background()
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		s, err := New(client, WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l := limittest.MustNew(s, limit.Policy{Name: "peek", Algorithm: limit.SlidingWindow,
			Quotas: []limit.Rate{{Limit: 3, Window: time.Minute}, {Limit: 10, Window: time.Hour}},
			Plans:  map[string][]limit.Rate{"pro": {{Limit: 5, Window: time.Minute}}},
			Plan: func(r limit.Request) (string, error) {
				if id, _ := r.Native.(string); strings.HasPrefix(id, "pro-") {
					return "pro", nil
				}
				return "", nil
			}}, limit.WithKeyPrefix(prefix))
		for _, id := range []string{"a", "a", "a", "a", "pro-a"} {
			if _, err := l.Consume(ctx, id); err != nil {
				t.Fatal(err)
			}
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
		if len(before) != 3 {
			t.Fatalf("%d keys after the requests, want 3", len(before))
		}
		calls := commandCalls(t, nodes)
		for _, id := range []string{"a", "pro-a", "fresh", "pro-fresh"} {
			for range 5 {
				if _, err := l.Peek(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
		}
		d, _ := l.Peek(ctx, "a")
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("Peek of the spent identity: %+v", d)
		}
		writes := commandCalls(t, nodes)
		after := read()
		for k, b := range before {
			a, ok := after[k]
			if !ok || a.val != b.val || a.pttl > b.pttl || a.pttl < b.pttl-5000 {
				t.Errorf("key %s: %+v before the Peeks, %+v (present %v) after", k, b, a, ok)
			}
		}
		if len(after) != len(before) {
			t.Errorf("%d keys after the Peeks, %d before", len(after), len(before))
		}
		for _, cmd := range []string{"set", "setrange", "del", "unlink", "pexpire", "pexpireat", "expire", "evalsha_ro"} {
			if n := writes[cmd] - calls[cmd]; n != 0 {
				t.Errorf("the Peeks ran %s %d times", cmd, n)
			}
		}
		t.Logf("21 Peeks: %d EVALSHA, %d MGET, %d TIME on the server", writes["evalsha"]-calls["evalsha"], writes["mget"]-calls["mget"], writes["time"]-calls["time"])
		calls = commandCalls(t, nodes)
		for range 2 {
			if err := l.Reset(ctx, "a"); err != nil {
				t.Fatal(err)
			}
		}
		writes = commandCalls(t, nodes)
		if n := writes["del"] - calls["del"]; n != 0 {
			t.Errorf("2 Resets of live keys ran %d DEL, want none", n)
		}
		if n := writes["evalsha"] + writes["eval"] - calls["evalsha"] - calls["eval"]; n < 2 || n > 3 {
			t.Errorf("2 Resets ran %d EVALSHA and EVAL, want 2 (and an EVAL after NOSCRIPT)", n)
		}
		left := read()
		if len(left) != len(before) {
			t.Errorf("after Reset(a): keys %v, want %d", left, len(before))
		}
		for k, b := range before {
			a := left[k]
			switch {
			case strings.Contains(k, "pro-a"):
				if a != b && (a.val != b.val || a.pttl > b.pttl) {
					t.Errorf("pro-a's key %s: %+v before a's Resets, %+v after", k, b, a)
				}
			case len(a.val) != 48 || a.val[40] != 2 || a.val[:24] != strings.Repeat("\x00", 24) || a.val[24:40] != b.val[24:40] || a.pttl > b.pttl || a.pttl <= 0:
				t.Errorf("a's key %s after 2 Resets: %q (PTTL %d), want the empty state of epoch 2, expiry and PTTL kept (%q, %d before)", k, a.val, a.pttl, b.val, b.pttl)
			}
		}
		if d, _ := l.Peek(ctx, "a"); !d.Allowed || d.Remaining != 2 {
			t.Errorf("Peek after Reset: %+v, want a whole quota", d)
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
