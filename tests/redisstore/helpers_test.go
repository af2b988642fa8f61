package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// The real-server tests read these (exported by scripts/test.sh, or by
// `scripts/redis.sh up DIR; . DIR/env`). Without them they skip, loudly, and
// the miniredis half still runs.
const (
	envURL     = "QUOTAGATE_REDIS_URL"        // redis://127.0.0.1:PORT, standalone
	envCluster = "QUOTAGATE_REDIS_CLUSTER"    // 127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
	envServer  = "QUOTAGATE_REDIS_SERVER_BIN" // redis-server, for the outage tests' own servers
)

func TestMain(m *testing.M) {
	if os.Getenv(envURL) == "" {
		println("redisstore: !!! " + envURL + " is not set: the REAL Redis tests (standalone, Cluster, outage, " +
			"INFO commandstats, benchmarks) are SKIPPED; only the miniredis half runs. Run `make test` with redis-server on PATH.")
	}
	goleak.VerifyTestMain(m,
		// A rueidis Cluster client schedules a topology refresh after a
		// dropped connection (a goroutine that sleeps up to ~1 s), and
		// closes connections a refresh replaced 5 s later. Both end by
		// themselves after the client is closed.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

func skipNoEnv(t testing.TB, env, what string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Skipf("!!! SKIPPED: %s is not set, so the %s half of this test did NOT run "+
			"(run `make test` with redis-server on PATH, or `scripts/redis.sh up DIR && . DIR/env`)", env, what)
	}
	return v
}

// backend is one Redis flavour the shared tests run against.
type backend struct {
	name string
	// newClient returns a fresh client (its own connections), closed at
	// the end of the test.
	newClient func(t testing.TB) rueidis.Client
	// real is false for miniredis, whose TTLs do not count down by
	// themselves and which has no INFO commandstats.
	real bool
	// killConns drops every client connection on the server(s).
	killConns func(t testing.TB)
	// mini is the miniredis server (nil for a real one): its TIME can be
	// set (SetTime).
	mini *miniredis.Miniredis
}

// backends returns miniredis, the standalone server and the Cluster; the
// real ones are nil (and reported by forEachBackend) when not configured.
func forEachBackend(t *testing.T, f func(t *testing.T, be *backend)) {
	t.Run("miniredis", func(t *testing.T) { f(t, miniBackend(t)) })
	t.Run("standalone", func(t *testing.T) { f(t, standaloneBackend(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, clusterBackend(t)) })
}

// forEachBackendAndAlgorithm runs f for every backend and algorithm, each
// a subtest with a fresh key prefix.
func forEachBackendAndAlgorithm(t *testing.T, f func(t *testing.T, be *backend, alg limit.Algorithm, prefix string)) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) { f(t, be, alg, testPrefix(t)) })
		}
	})
}

func miniBackend(t testing.TB) *backend { return miniBackendOf(miniBackendServer(t)) }

// miniBackendServer starts a miniredis, closed at the end of the test.
func miniBackendServer(t testing.TB) *miniredis.Miniredis { return miniredis.RunT(t) }

func miniBackendOf(mr *miniredis.Miniredis) *backend {
	return &backend{
		name: "miniredis", mini: mr,
		// ForceSingleClient: miniredis answers CLUSTER SLOTS, so rueidis
		// would otherwise build a Cluster client for it, on which the
		// Store never batches (group commit); miniredis is one server.
		newClient: func(t testing.TB) rueidis.Client {
			return mustClient(t, rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true})
		},
		killConns: func(t testing.TB) {
			mr.Close() // drops every connection; the data stays
			if err := mr.Restart(); err != nil {
				t.Fatalf("miniredis restart: %v", err)
			}
		},
	}
}

func standaloneBackend(t testing.TB) *backend {
	url := skipNoEnv(t, envURL, "real standalone Redis")
	opt, err := ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", url, err)
	}
	return &backend{
		name: "standalone", real: true,
		newClient: func(t testing.TB) rueidis.Client { return mustClient(t, opt) },
		killConns: func(t testing.TB) { killConns(t, []string{opt.InitAddress[0]}) },
	}
}

func clusterBackend(t testing.TB) *backend {
	addrs := strings.Split(skipNoEnv(t, envCluster, "real Redis Cluster"), ",")
	opt := rueidis.ClientOption{InitAddress: addrs, DisableCache: true, AlwaysPipelining: true}
	return &backend{
		name: "cluster", real: true,
		newClient: func(t testing.TB) rueidis.Client { return mustClient(t, opt) },
		killConns: func(t testing.TB) { killConns(t, addrs) },
	}
}

func mustClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", opt.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}

// nodeClient is a client for one server, never redirected (admin commands).
func nodeClient(t testing.TB, addr string) rueidis.Client {
	return mustClient(t, rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
}

// killConns runs CLIENT KILL TYPE normal on every node: every connection but
// the admin one is dropped. At least one must have been.
func killConns(t testing.TB, addrs []string) {
	t.Helper()
	var killed int64
	for _, a := range addrs {
		c := nodeClient(t, a)
		n, err := c.Do(context.Background(), c.B().ClientKill().TypeNormal().Build()).AsInt64()
		if err != nil {
			t.Fatalf("CLIENT KILL on %s: %v", a, err)
		}
		killed += n
		c.Close()
	}
	if killed == 0 {
		t.Fatalf("CLIENT KILL dropped no connection on %v", addrs)
	}
}

// newStore wraps a fresh client of be, with a 10 s timeout unless opts
// set another (a loaded machine under -race can take well over the 100 ms
// default for a round trip).
func newStore(t testing.TB, be *backend, opts ...Option) *Store {
	t.Helper()
	s, err := New(be.newClient(t), append([]Option{WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// frozenStore returns a Store on a client of its own, with the caller's
// clock frozen at the real time of the call (Unix ms, returned), the
// client, and a key prefix whose keys are deleted when t ends.
func frozenStore(t *testing.T, be *backend) (s *Store, client rueidis.Client, prefix string, now int64) {
	t.Helper()
	prefix = testPrefix(t)
	client = be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	now = time.Now().UnixMilli()
	s, err := New(client, WithClock(func() time.Time { return time.UnixMilli(now) }))
	if err != nil {
		t.Fatal(err)
	}
	return s, client, prefix, now
}

// testPrefix is a key prefix unique to this test run, so runs sharing a
// server never see each other's keys.
func testPrefix(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "qgt" + hex.EncodeToString(b[:])
}

// scanKeys returns every key under prefix on every node the client knows.
func scanKeys(t testing.TB, c rueidis.Client, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for addr, n := range c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatalf("SCAN on %s: %v", addr, err)
			}
			keys = append(keys, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return keys
}

// pttl returns the key's PTTL (-2: no key, -1: no TTL).
func pttl(t testing.TB, c rueidis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return v
}

// ttlBound is the longest time to live a key of quota q may carry without
// clock steps (DESIGN.md, "Store keys"): FixedWindow a window plus 1 s of
// grace, SlidingWindow two windows, TokenBucket twice the time to fill the
// bucket (the state's life, plus one refill time of slack so that a busy
// key moves its deadline at most once per refill time).
func ttlBound(q *limitstore.Quota) int64 {
	switch q.Algorithm {
	case limit.FixedWindow:
		return q.WindowMS + 1000
	case limit.TokenBucket:
		return 2 * refillMS(q)
	}
	return 2 * q.WindowMS
}

// refillMS is a token bucket's refill time, Burst*Window/Limit rounded up.
func refillMS(q *limitstore.Quota) int64 {
	return max((q.Burst*q.WindowMS+q.Limit-1)/q.Limit, 1)
}

// keyBound is the bound on the deadline of a key written with a Result
// whose TTLMS is ttl: ttlBound, or, after the clock stepped back (a window
// decided at a stored window up to 1 s ahead), the state's own TTL plus the
// token bucket's slack.
func keyBound(q *limitstore.Quota, ttl int64) int64 {
	slack := int64(0)
	if q.Algorithm == limit.TokenBucket {
		slack = refillMS(q)
	}
	return max(ttlBound(q), ttl+slack)
}

// oneQuota is an Op of one quota q on key, at cost.
func oneQuota(key string, q limitstore.Quota, cost int64) limitstore.Op {
	q.Key = []byte(key)
	return limitstore.Op{Cost: cost, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}
}

// checkTTLs asserts the TTL invariant: every key under prefix has
// 0 < PTTL <= the bound of its policy. bounds maps each key the test wrote
// to its bound; a key outside it fails the test. With expiring set (keys
// whose TTLs run out while the check runs), a key that is gone by the time
// of its PTTL (-2) or is in its last millisecond (0) passes too; a key
// without a TTL (-1) never does. It returns the number of keys checked.
func checkTTLs(t testing.TB, c rueidis.Client, prefix string, bounds map[string]int64, expiring bool) int {
	t.Helper()
	keys := scanKeys(t, c, prefix)
	for _, k := range keys {
		b, ok := bounds[k]
		if !ok {
			t.Errorf("key %q was not written by this test", k)
			continue
		}
		p := pttl(t, c, k)
		if expiring && (p == -2 || p == 0) {
			continue
		}
		if p <= 0 || p > b {
			t.Errorf("key %q: PTTL %d ms, want 0 < PTTL <= %d", k, p, b)
		}
	}
	return len(keys)
}

// fnv64 is FNV-1a, as the engine hashes for the Cluster hash tag.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// hashTag returns "{xxxxxxxx}" for s, the engine's tag shape.
func hashTag(s string) string {
	h := fnv64(s)
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(h>>56), byte(h>>48), byte(h>>40), byte(h>>32)
	return "{" + hex.EncodeToString(b[:]) + "}"
}

// opKey lays out a key as the engine does: prefix:{tag}:bucket:letter:r:id.
func opKey(prefix, bucket string, alg limit.Algorithm, id string) string {
	return taggedKey(prefix, hashTag(bucket+"\x00"+id), bucket, alg, id)
}

// taggedKey is opKey with a given tag: the keys of one Op's quotas share it.
func taggedKey(prefix, tag, bucket string, alg limit.Algorithm, id string) string {
	letter := map[limit.Algorithm]string{limit.SlidingWindow: "s", limit.FixedWindow: "f", limit.TokenBucket: "g"}[alg]
	return prefix + ":" + tag + ":" + bucket + ":" + letter + ":r:" + id
}

// takeOne calls s.Take under a deadline of its own (10 s). Long sequences
// use it rather than one ctxT for the whole run: 10 000 steps on miniredis
// under -race on a loaded machine can take longer than ctxT's 30 s.
func takeOne(s limitstore.Store, op *limitstore.Op) (limitstore.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Take(ctx, op)
}

// ctxT is a context bounded by a generous deadline for test plumbing.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
