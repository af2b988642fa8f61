package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// killConns drops every connection of the clients newClient returned
	// (and only those: the servers are shared with other tests and
	// packages).
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
	name := testPrefix(t) // the CLIENT SETNAME of this backend's clients
	opt.ClientName = name
	return &backend{
		name: "standalone", real: true,
		newClient: func(t testing.TB) rueidis.Client { return mustClient(t, opt) },
		killConns: func(t testing.TB) { killConns(t, []string{opt.InitAddress[0]}, name) },
	}
}

func clusterBackend(t testing.TB) *backend {
	addrs := strings.Split(skipNoEnv(t, envCluster, "real Redis Cluster"), ",")
	name := testPrefix(t) // the CLIENT SETNAME of this backend's clients
	opt := rueidis.ClientOption{InitAddress: addrs, DisableCache: true, AlwaysPipelining: true, ClientName: name}
	return &backend{
		name: "cluster", real: true,
		newClient: func(t testing.TB) rueidis.Client { return mustClient(t, opt) },
		killConns: func(t testing.TB) { killConns(t, addrs, name) },
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

// killConns drops, on every node, each connection named name (CLIENT
// LIST, then CLIENT KILL ID: Redis 7.0 kills by no name). The servers are
// shared with the other tests and the other packages of a `go test
// ./...`, so no one else's connection goes. At least one must have been
// dropped.
func killConns(t testing.TB, addrs []string, name string) {
	t.Helper()
	ctx := context.Background()
	killed := 0
	for a, ids := range namedConns(t, addrs, name) {
		c := nodeClient(t, a)
		for _, id := range ids {
			// An error is a connection that went by itself meanwhile.
			if c.Do(ctx, c.B().ClientKill().Id(id).Build()).Error() == nil {
				killed++
			}
		}
		c.Close()
	}
	if killed == 0 {
		t.Fatalf("CLIENT KILL dropped no connection named %s on %v", name, addrs)
	}
}

// namedConns returns, for each of addrs, the ids of the connections named
// name there (CLIENT LIST; the admin connection that asks is unnamed).
func namedConns(t testing.TB, addrs []string, name string) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for _, a := range addrs {
		c := nodeClient(t, a)
		list, err := c.Do(context.Background(), c.B().ClientList().Build()).ToString()
		c.Close()
		if err != nil {
			t.Fatalf("CLIENT LIST on %s: %v", a, err)
		}
		out[a] = nil
		// RESP3 answers a verbatim string: "txt:" leads the first line.
		for line := range strings.Lines(strings.TrimPrefix(list, "txt:")) {
			var id int64
			named := false
			for f := range strings.FieldsSeq(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "id":
					id, _ = strconv.ParseInt(v, 10, 64)
				case "name":
					named = v == name
				}
			}
			if named {
				out[a] = append(out[a], id)
			}
		}
	}
	return out
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
	s, err := New(client, WithClock(func() time.Time { return time.UnixMilli(now) }), WithoutGuard())
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
// grace, SlidingWindow two windows, TokenBucket the time to fill the
// bucket plus its slack (its refill time, at most 1 s: a busy key moves
// its deadline at most once a second).
func ttlBound(q *limitstore.Quota) int64 {
	switch q.Algorithm {
	case limit.FixedWindow:
		return q.WindowMS + 1000
	case limit.TokenBucket:
		return refillMS(q) + bucketSlackMS(q)
	}
	return 2 * q.WindowMS
}

// refillMS is a token bucket's refill time, Burst*Window/Limit rounded up.
func refillMS(q *limitstore.Quota) int64 {
	return max((q.Burst*q.WindowMS+q.Limit-1)/q.Limit, 1)
}

// bucketSlackMS is how far past its state's expiry a token bucket's key
// may live: its refill time, at most 1 s.
func bucketSlackMS(q *limitstore.Quota) int64 { return min(refillMS(q), 1000) }

// keyBound is the bound on the deadline of a key written with a Result
// whose TTLMS is ttl: ttlBound, or, after the clock stepped back (a window
// decided at a stored window up to 1 s ahead), the state's own TTL plus the
// token bucket's slack.
func keyBound(q *limitstore.Quota, ttl int64) int64 {
	slack := int64(0)
	if q.Algorithm == limit.TokenBucket {
		slack = bucketSlackMS(q)
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
	return limittest.Take(ctx, s, op)
}

// ctxT is a context bounded by a generous deadline for test plumbing.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Group commit: concurrent Takes share one EVALSHA of the batch
// script. These tests drive the batching deterministically through the
// public API: gatedClient holds every EVALSHA until the test lets it go, so
// the Store's calls stay out and later Takes queue; watchCtx tells when a
// Take waits in the queue (it asks its context's Done only then, after it
// was queued, and only a gated call asks it first), so the test knows the
// queue's order.

// gatedClient is a rueidis.Client whose EVALSHA calls, while gated, report
// themselves on arrived (with their Op count: opsOf) and wait for a permit
// (or their context).
type gatedClient struct {
	rueidis.Client
	gated   atomic.Bool
	arrived chan int
	permits chan struct{}
	mu      sync.Mutex
	calls   []int // the Op counts of the EVALSHA calls, gated or not
}

func newGated(c rueidis.Client) *gatedClient {
	return &gatedClient{Client: c, arrived: make(chan int), permits: make(chan struct{}, 1000)}
}

func (g *gatedClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) > 3 && strings.EqualFold(cs[0], "EVALSHA") {
		nk, _ := strconv.Atoi(cs[2])
		ops := opsOf(cs[3+nk:])
		g.mu.Lock()
		g.calls = append(g.calls, ops)
		g.mu.Unlock()
		if g.gated.Load() {
			g.arrived <- ops
			select {
			case <-g.permits:
			case <-ctx.Done():
				return rueidis.NewErrorResult(ctx.Err())
			}
		}
	}
	return g.Client.Do(ctx, cmd)
}

// opsOf is the number of Ops a store's script call with arguments args
// decides: 1 for a plain call (one argument), else the Ops of the batch
// (the store's wire format: ARGV[1] holds per Op n, the index of its
// argument, n key indexes and 4 bytes of phase; the arguments follow); 0
// for neither.
func opsOf(args []string) int {
	if len(args) == 1 {
		return 1
	}
	if len(args) == 0 {
		return 0
	}
	h, ops := args[0], 0
	for len(h) >= 2 {
		n := int(h[0]) &^ 0x80 // the head's flag: the key is read again later
		if n < 1 || n > limitstore.MaxQuotas || int(h[1]) < 2 || int(h[1]) > len(args) || len(h) < 6+n {
			return 0
		}
		h, ops = h[6+n:], ops+1
	}
	if h != "" {
		return 0
	}
	return ops
}

// batchCalls returns the Op counts of the store's script calls.
func (g *gatedClient) batchCalls() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// watchCtx closes asked the first time Done is called.
type watchCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func newWatchCtx(parent context.Context) *watchCtx {
	return &watchCtx{Context: parent, asked: make(chan struct{})}
}

func (c *watchCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// outcome is one Take's answer.
type outcome struct {
	res limitstore.Result
	err error
}

// gatedRun starts Takes on s through g one at a time: first fillers (Ops
// on keys of their own) until one of them queues, so every call slot is
// held by a gated call; then each of ops, waiting until it is queued. It
// returns the fillers' and the ops' outcome channels, in the ops' order.
// The caller then lets the calls go (release).
type gatedRun struct {
	t       *testing.T
	s       *Store
	g       *gatedClient
	held    int // gated calls waiting for a permit
	fillers []chan outcome
}

func startGated(t *testing.T, s *Store, g *gatedClient, fillerPrefix string) *gatedRun {
	t.Helper()
	return startGatedWith(t, s, g, func(i int) limitstore.Op {
		return oneQuota(fmt.Sprintf("%s:{fill%d}:f", fillerPrefix, i),
			limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	})
}

// startGatedWith is startGated with the fillers' Ops made by filler (the
// i-th filler's; each on keys of its own): the last one made is the one
// that queued, the first Op of the flight.
func startGatedWith(t *testing.T, s *Store, g *gatedClient, filler func(i int) limitstore.Op) *gatedRun {
	t.Helper()
	r := &gatedRun{t: t, s: s, g: g}
	g.gated.Store(true)
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 concurrent Takes and none queued: the Store does not batch")
		}
		op := filler(i)
		ch, queued := r.start(context.Background(), &op)
		r.fillers = append(r.fillers, ch)
		if queued {
			return r
		}
	}
}

// start runs limittest.Take(ctx, s, op) in a goroutine and waits until it either
// reaches the client (a plain call, held by the gate) or waits in the
// queue; queued reports which.
func (r *gatedRun) start(ctx context.Context, op *limitstore.Op) (ch chan outcome, queued bool) {
	r.t.Helper()
	wc := newWatchCtx(ctx)
	ch = make(chan outcome, 1)
	go func() {
		res, err := limittest.Take(wc, r.s, op)
		ch <- outcome{res, err}
	}()
	select {
	case <-r.g.arrived:
		r.held++
		return ch, false
	case <-wc.asked:
		return ch, true
	case <-time.After(10 * time.Second):
		r.t.Fatal("a Take neither reached Redis nor queued within 10 s")
	}
	return nil, false
}

// startOrFail is start for a Take that may fail before it is queued (it
// then returns at once, never asking its context).
func (r *gatedRun) startOrFail(op *limitstore.Op) chan outcome {
	r.t.Helper()
	wc := newWatchCtx(context.Background())
	ch, done := make(chan outcome, 1), make(chan struct{})
	go func() {
		res, err := limittest.Take(wc, r.s, op)
		ch <- outcome{res, err}
		close(done)
	}()
	select {
	case <-r.g.arrived:
		r.t.Fatal("a Take reached Redis while the calls were held; want it queued")
	case <-wc.asked:
	case <-done:
	case <-time.After(10 * time.Second):
		r.t.Fatal("a Take neither failed nor queued within 10 s")
	}
	return ch
}

// release lets the held calls and every later call go.
func (r *gatedRun) release() {
	r.g.gated.Store(false)
	for range r.held {
		r.g.permits <- struct{}{}
	}
	r.held = 0
	// A flight that arrived gated before the gate opened.
	for {
		select {
		case <-r.g.arrived:
			r.g.permits <- struct{}{}
		default:
			return
		}
	}
}

// releaseAll lets every call go and waits for the fillers' decisions.
func (r *gatedRun) releaseAll() {
	r.t.Helper()
	r.release()
	for _, ch := range r.fillers {
		if o := r.wait(ch); o.err != nil {
			r.t.Fatalf("filler: %v", o.err)
		}
	}
}

// neverSent fails t unless op's (first) key does not exist: the Take that
// gave up was never sent.
func neverSent(t *testing.T, client rueidis.Client, op *limitstore.Op) {
	t.Helper()
	if n, err := client.Do(context.Background(), client.B().Exists().Key(string(op.Quotas[0].Key)).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("EXISTS of the key of the Take that gave up: %d, %v; want 0 (never sent)", n, err)
	}
}

// wait returns the outcome on ch (10 s at most).
func (r *gatedRun) wait(ch chan outcome) outcome {
	r.t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		r.t.Fatal("a Take did not return within 10 s")
	}
	return outcome{}
}

// forOneServer runs f on the backends that batch: miniredis and the
// standalone server (a Cluster never batches).
func forOneServer(t *testing.T, f func(t *testing.T, be *backend)) {
	t.Run("miniredis", func(t *testing.T) { f(t, miniBackend(t)) })
	t.Run("standalone", func(t *testing.T) { f(t, standaloneBackend(t)) })
}

// countingStore is a Store on a gatedClient of be (not gated: it counts
// the script calls); the test's keys are under prefix, deleted at the end.
func countingStore(t *testing.T, be *backend) (prefix string, client rueidis.Client, s *Store, g *gatedClient) {
	t.Helper()
	prefix = testPrefix(t)
	client = be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	g = newGated(client)
	s, err := New(g, WithoutGuard())
	if err != nil {
		t.Fatal(err)
	}
	return prefix, client, s, g
}

// gatedStore is countingStore with the Store's calls held by fillers
// (startGated).
func gatedStore(t *testing.T, be *backend) (prefix string, client rueidis.Client, s *Store, g *gatedClient, r *gatedRun) {
	t.Helper()
	prefix, client, s, g = countingStore(t, be)
	return prefix, client, s, g, startGated(t, s, g, prefix+":fill")
}
