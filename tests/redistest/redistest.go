// Package redistest gives the tests of the tests module (the adapters' conformance
// runs) Redis stores on the servers `make test` starts: Standalone reads
// QUOTAGATE_REDIS_URL, Cluster reads QUOTAGATE_REDIS_CLUSTER. Without them the
// calling test is skipped with a loud reason. Each store decides at an
// injected clock and namespaces its keys, so tests sharing a server never see
// each other's state. Matrix runs an adapter's conformance harness on these
// two and on the memory store (Memory): the one matrix every adapter runs.
package redistest

import (
	"context"
	"github.com/quotagate/quotagate/engine/limittest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// Environment variables exported by scripts/test.sh.
const (
	EnvURL     = "QUOTAGATE_REDIS_URL"     // redis://127.0.0.1:PORT
	EnvCluster = "QUOTAGATE_REDIS_CLUSTER" // 127.0.0.1:P1,127.0.0.1:P2,...
	// EnvSentinel is the Sentinel set's sentinels (LockSentinel).
	EnvSentinel = "QUOTAGATE_REDIS_SENTINEL" // 127.0.0.1:S1,127.0.0.1:S2,...
)

// Matrix runs every conformance scenario through h on the memory store
// ("memory"), the standalone server ("redis") and the Cluster
// ("redis-cluster"), one subtest per store (conformance.RunMatrix); the Redis
// rows skip loudly when make test's servers are not there.
func Matrix(t *testing.T, h conformance.Harness) {
	conformance.RunMatrix(t, h, conformance.Row{Store: "memory", New: Memory},
		conformance.Row{Store: "redis", New: Standalone}, conformance.Row{Store: "redis-cluster", New: Cluster})
}

// LockSentinel holds the Sentinel set of `make test` for t until t ends.
// There is one set, and the packages of a `go test ./...` run in parallel
// processes: a test that kills its primary (tests/sentinel) must not run
// while another one counts on it answering. The lock is an flock on a file
// in os.TempDir(), so it holds across processes and goes with the process
// that held it; it is named after the set's sentinels
// (QUOTAGATE_REDIS_SENTINEL), so runs on other sets do not wait.
func LockSentinel(t testing.TB) {
	t.Helper()
	name := "quotagate-sentinel-" + strings.NewReplacer(":", "-", ",", "_", "/", "-").Replace(os.Getenv(EnvSentinel)) + ".lock"
	f, err := os.OpenFile(filepath.Join(os.TempDir(), name), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("the Sentinel set's lock file: %v", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		t.Fatalf("locking the Sentinel set: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing the file drops the lock
}

// Memory returns a fresh memory store deciding at clock: the matrix's
// memory row and the store of the adapters' benchmarks.
var Memory = conformance.StoreOf(func(clock func() time.Time) (*memstore.Store, error) {
	return memstore.New(memstore.WithClock(clock))
})

// Standalone returns a store on the standalone server, or skips t.
func Standalone(t testing.TB, clock func() time.Time) limitstore.Store {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		t.Skipf("!!! SKIPPED: %s is not set, so this Redis standalone run did NOT happen (run `make test` with redis-server on PATH)", EnvURL)
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return open(t, opt, clock)
}

// Cluster returns a store on the Redis Cluster, or skips t.
func Cluster(t testing.TB, clock func() time.Time) limitstore.Store {
	t.Helper()
	addrs := os.Getenv(EnvCluster)
	if addrs == "" {
		t.Skipf("!!! SKIPPED: %s is not set, so this Redis Cluster run did NOT happen (run `make test` with redis-server on PATH)", EnvCluster)
	}
	nodes := strings.Split(addrs, ",")
	url := "redis://" + nodes[0]
	for i, n := range nodes[1:] {
		url += map[bool]string{true: "?", false: "&"}[i == 0] + "addr=" + n
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return open(t, opt, clock)
}

func open(t testing.TB, opt rueidis.ClientOption, clock func() time.Time) limitstore.Store {
	t.Helper()
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connecting to Redis: %v", err)
	}
	t.Cleanup(client.Close)
	s, err := redisstore.New(client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return &namespaced{Store: s, ns: "t" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(seq.Add(1), 10) + "."}
}

var seq atomic.Int64

// namespaced prefixes every key with a per-store namespace. The prefix goes
// before the key, so the key's hash tag stays its first "{...}".
type namespaced struct {
	*redisstore.Store
	ns string
}

func (n *namespaced) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = n.take(ctx, op)
	return err
}

func (n *namespaced) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	o := *op
	for i := range o.N {
		o.Quotas[i].Key = append([]byte(n.ns), op.Quotas[i].Key...)
	}
	if op.Block.Key != nil {
		o.Block.Key = append([]byte(n.ns), op.Block.Key...)
	}
	return limittest.Take(ctx, n.Store, &o)
}

func (n *namespaced) Acquire(ctx context.Context, op *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	o := *op
	o.Key = append([]byte(n.ns), op.Key...)
	return n.Store.Acquire(ctx, &o)
}

func (n *namespaced) Release(ctx context.Context, op *limitstore.LeaseOp) (bool, error) {
	o := *op
	o.Key = append([]byte(n.ns), op.Key...)
	return n.Store.Release(ctx, &o)
}

func (n *namespaced) Reset(ctx context.Context, keys [][]byte) error {
	ks := make([][]byte, len(keys))
	for i, k := range keys {
		ks[i] = append([]byte(n.ns), k...)
	}
	return n.Store.Reset(ctx, ks)
}
