package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// trivialScript is the baseline: one EVALSHA through rueidis that touches
// nothing and returns 1, on the same keys (so the same routing) as the store.
var trivialScript = rueidis.NewLuaScript("return 1")

// BenchmarkRedis measures decisions per second on loopback at 64 and 256
// goroutines: the raw EVALSHA baseline, Store.Take, and a whole engine
// decision (Limiter.Consume), over 1024 identities with a limit high enough
// that nearly every call is admitted (the write path). Compare
// decisions/s of store-take with raw-evalsha in the same run.
//
//	. DIR/env && go test -run '^$' -bench Redis -benchtime 1s
func BenchmarkRedis(b *testing.B) {
	url := skipNoEnv(b, envURL, "benchmark (real standalone Redis)")
	s, err := NewFromURL(url, WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	prefix := testPrefix(b)
	defer deleteKeys(b, s.Client(), prefix)
	const nkeys = 1024
	ops := make([]limitstore.Op, nkeys)
	keys := make([][]string, nkeys)
	ids := make([]string, nkeys)
	for i := range ops {
		ids[i] = fmt.Sprintf("client-%d", i)
		k := opKey(prefix, "1000000p60", limit.SlidingWindow, ids[i])
		ops[i] = oneQuota(k, limitstore.Quota{Algorithm: limit.SlidingWindow,
			Limit: 1_000_000, WindowMS: 60_000, PhaseMS: int64(i) * 37 % 60_000}, 1)
		keys[i] = []string{k}
	}
	lim := limittest.MustNew(s, limit.Policy{Limit: 1_000_000, Window: time.Minute},
		limit.WithKeyPrefix(prefix))
	c := s.Client()
	ctx := context.Background()
	for _, g := range []int{64, 256} {
		b.Run(fmt.Sprintf("raw-evalsha/g=%d", g), func(b *testing.B) {
			parallel(b, g, func(i int) error { return trivialScript.Exec(ctx, c, keys[i%nkeys], nil).Error() })
		})
		b.Run(fmt.Sprintf("store-take/g=%d", g), func(b *testing.B) {
			parallel(b, g, func(i int) error {
				_, err := limittest.Take(ctx, s, &ops[i%nkeys])
				return err
			})
		})
		b.Run(fmt.Sprintf("limiter-consume/g=%d", g), func(b *testing.B) {
			parallel(b, g, func(i int) error {
				_, err := lim.Consume(ctx, ids[i%nkeys])
				return err
			})
		})
	}
}

// BenchmarkRedisCallerContext is one allowed decision (Limiter.Consume)
// on a real Redis, one caller at a time and from 64 goroutines, for a
// caller whose context is a background one, a cancellable one (every HTTP
// request's: the guard watches it while the call waits, to release the
// caller when it goes away) and one cancelled before the call (the guard
// never watches it: the path before callers were released), in one run:
//
//	. DIR/env && go test -run '^$' -bench RedisCallerContext -benchmem
func BenchmarkRedisCallerContext(b *testing.B) {
	url := skipNoEnv(b, envURL, "benchmark (real standalone Redis)")
	s, err := NewFromURL(url, WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	prefix := testPrefix(b)
	defer deleteKeys(b, s.Client(), prefix)
	const nkeys = 1024
	ids := make([]string, nkeys)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%d", i)
	}
	lim := limittest.MustNew(s, limit.Policy{Limit: 1_000_000, Window: time.Minute},
		limit.WithKeyPrefix(prefix))
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	before, stop := context.WithCancel(context.Background())
	stop()
	for _, g := range []int{1, 64} {
		for _, c := range []struct {
			name string
			ctx  context.Context
		}{{"cancelled-before", before}, {"background", context.Background()}, {"cancellable", cancellable}} {
			b.Run(fmt.Sprintf("%s/g=%d", c.name, g), func(b *testing.B) {
				parallel(b, g, func(i int) error {
					d, err := lim.Consume(c.ctx, ids[i%nkeys])
					if err == nil && !d.Allowed {
						err = fmt.Errorf("denied: %+v", d)
					}
					return err
				})
			})
		}
	}
}

// parallel runs f from g goroutines and reports decisions/s.
func parallel(b *testing.B, g int, f func(i int) error) {
	b.ReportAllocs()
	b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if err := f(i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// commandCalls sums INFO commandstats "calls" per command over the nodes.
func commandCalls(t *testing.T, nodes []rueidis.Client) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, n := range nodes {
		info, err := n.Do(context.Background(), n.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatalf("INFO commandstats: %v", err)
		}
		for _, line := range strings.Split(info, "\n") {
			// cmdstat_evalsha:calls=300,usec=...,rejected_calls=0,failed_calls=0
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					c, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatalf("INFO line %q: %v", line, err)
					}
					calls[strings.TrimPrefix(name, "cmdstat_")] += c
				}
			}
		}
	}
	return calls
}

// loadScript has the store's script cached on the node at addr: one Take
// through a Store on a client of that node alone, on a key of a slot the
// node serves (a Cluster node answers MOVED for the others).
func loadScript(t *testing.T, node rueidis.Client, prefix, addr string) {
	t.Helper()
	s, err := New(node, WithoutGuard())
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for i := range 1000 {
		op := oneQuota(taggedKey(prefix, fmt.Sprintf("{w%d}", i), "warm", limit.FixedWindow, "x"),
			limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
		if _, last = takeOne(s, &op); last == nil {
			return
		}
	}
	t.Fatalf("no key of 1000 was served by %s: %v", addr, last)
}

// TestOneCallPerDecision counts server-side commands (INFO commandstats,
// which also counts the commands a script runs): N decisions are exactly N
// EVALSHA and no EVAL; inside, one TIME, one GET (MGET for an Op of several
// quotas), and per admitted request one write per quota (SET with the TTL, or
// SETRANGE keeping it, then PTTL, which tells a key that lost its TTL,
// and only for such a key PEXPIREAT: none here); a denied request only
// reads. Refunds write only what changed.
func TestOneCallPerDecision(t *testing.T) {
	run := func(t *testing.T, be *backend, addrs []string) {
		nodes := make([]rueidis.Client, len(addrs))
		for i, a := range addrs {
			nodes[i] = nodeClient(t, a)
		}
		ctx := ctxT(t)
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		// Load the script everywhere first: a node's first EVALSHA would
		// answer NOSCRIPT and be followed by an EVAL (which caches it).
		for i, n := range nodes {
			loadScript(t, n, prefix, addrs[i])
		}
		rec := &limittest.Recorder{} // counts the denials the Store's deny cache answered without a call
		s, err := New(client, WithTimeout(10*time.Second), WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		var lims []*limit.Limiter
		for _, alg := range algorithms {
			lims = append(lims, limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: 10, Window: time.Hour},
				limit.WithKeyPrefix(prefix), limit.WithObserver(rec)))
		}
		// The client connects lazily: let it do its handshake before counting.
		if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if err := n.Do(ctx, n.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatalf("CONFIG RESETSTAT: %v", err)
			}
		}
		var decisions, allowed, denied int64
		for _, l := range lims {
			for i := range 100 {
				d, err := l.Consume(ctx, fmt.Sprintf("id%d", i%5)) // 20 calls per identity
				if err != nil {
					t.Fatal(err)
				}
				decisions++
				if d.Allowed {
					allowed++
				} else {
					denied++
				}
			}
		}
		// Ops of two quotas (one per algorithm pair), through the store:
		// one MGET each, two SETs per admitted one; then a refund of each
		// admitted charge: one SET per quota it changes.
		var multi, multiAllowed, multiDenied, refundSets int64
		// A key with no value is read again with GET after the MGET (a key
		// of another type must raise WRONGTYPE, not read as no state): once
		// per key here, at its first Op, which admits and writes it.
		seen := map[string]bool{}
		var absentReads int64
		skippedOne := int64(rec.Skipped("deny-cache")) // the Limiters' decisions the deny cache answered
		for i := range 60 {
			alg := algorithms[i%3]
			tag := hashTag(fmt.Sprint("m", i%6))
			op := limitstore.Op{Cost: 1, N: 2}
			for j, q := range []limitstore.Quota{
				{Algorithm: alg, Limit: 10, WindowMS: 3_600_000, Burst: 10},
				{Algorithm: algorithms[(i+1)%3], Limit: 4, WindowMS: 3_600_000, Burst: 4},
			} {
				q.Key = []byte(taggedKey(prefix, tag, fmt.Sprint("b", j), q.Algorithm, "m"))
				op.Quotas[j] = q
				if !seen[string(q.Key)] {
					seen[string(q.Key)], absentReads = true, absentReads+1
				}
			}
			res, err := limittest.Take(ctx, s, &op)
			if err != nil {
				t.Fatal(err)
			}
			multi++
			if !res.Allowed {
				multiDenied++
			} else {
				multiAllowed++
				if i%2 == 0 {
					op.Refund = true
					for j := range op.N {
						op.Quotas[j].Window = res.Quotas[j].Window
					}
					rr, err := limittest.Take(ctx, s, &op)
					if err != nil {
						t.Fatal(err)
					}
					multi++
					for j := range op.N {
						if rr.Quotas[j].TTLMS > 0 {
							refundSets++
						}
					}
				}
			}
		}
		calls := commandCalls(t, nodes)
		t.Logf("%d decisions (%d allowed, %d denied), %d on two quotas (%d allowed, %d refund writes): commandstats %v",
			decisions, allowed, denied, multi, multiAllowed, refundSets, calls)
		// The Store's own deny cache answers repeated denials of either
		// kind without a call.
		asked := decisions - skippedOne
		askedMulti := multi - (int64(rec.Skipped("deny-cache")) - skippedOne)
		want := map[string]int64{
			"evalsha": asked + askedMulti, "eval": 0, "time": asked + askedMulti, "get": asked + absentReads, "mget": askedMulti,
			"set+setrange": allowed + 2*multiAllowed + refundSets, "pexpire": 0, "pexpireat": 0, "pttl": calls["setrange"],
		}
		calls["set+setrange"] = calls["set"] + calls["setrange"]
		for cmd, n := range want {
			if calls[cmd] != n {
				t.Errorf("%s: %d calls, want %d", cmd, calls[cmd], n)
			}
		}
		if allowed == 0 || denied == 0 || multiAllowed == 0 || multiDenied == 0 || refundSets == 0 {
			t.Errorf("want every outcome: %d allowed, %d denied; multi-quota %d admitted, %d denied, %d refund writes",
				allowed, denied, multiAllowed, multiDenied, refundSets)
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
