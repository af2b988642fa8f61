// Package sentinel tests the Redis store through Redis Sentinel on the
// primary, replica and three sentinels that scripts/redis.sh starts (`make
// test`, when redis-sentinel is on PATH): the primary is killed by its PID
// under load and decisions must resume on the promoted replica within the
// failover time plus 1 s, leaving no key without a TTL.
package sentinel

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
	"github.com/quotagate/quotagate/tests/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// Exported by scripts/redis.sh (see its header).
const (
	envSentinels = "QUOTAGATE_REDIS_SENTINEL"        // 127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3
	envMaster    = "QUOTAGATE_REDIS_SENTINEL_MASTER" // the master set name
	envState     = "QUOTAGATE_REDIS_SENTINEL_STATE"  // NAME.{pid,port,args} of the data nodes
)

func TestMain(m *testing.M) {
	if os.Getenv(envSentinels) == "" {
		println("sentinel: !!! " + envSentinels + " is not set: the Sentinel failover test is SKIPPED. " +
			"Run `make test` with redis-sentinel on PATH (apt-get install -y redis-sentinel).")
	}
	goleak.VerifyTestMain(m,
		// rueidis' sentinel client ends its topology refresher and
		// re-dials by itself shortly after Close.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*sentinelClient).runTopologyRefreshment"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

const (
	rate = 200 // decisions per second offered during the test
	// resumeMargin is the allowance past the failover time.
	resumeMargin = time.Second
	storeTimeout = 100 * time.Millisecond // the Redis store's default timeout
)

type env struct {
	sentinels []string
	master    string
	state     string
	bin       string
}

func getEnv(t *testing.T) env {
	t.Helper()
	e := env{
		sentinels: strings.Split(os.Getenv(envSentinels), ","),
		master:    os.Getenv(envMaster),
		state:     os.Getenv(envState),
		bin:       os.Getenv(redisfault.EnvServerBin),
	}
	if e.sentinels[0] == "" || e.master == "" || e.state == "" || e.bin == "" {
		t.Skipf("!!! SKIPPED: %s, %s, %s and %s must all be set, so the Sentinel failover test did NOT run "+
			"(run `make test` with redis-server and redis-sentinel on PATH)", envSentinels, envMaster, envState, redisfault.EnvServerBin)
	}
	return e
}

// nodeClient is a client of one server (a sentinel or a data node).
func nodeClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("connecting to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// primaryOf asks one sentinel for the master set's address ("" on error).
func primaryOf(c rueidis.Client, master string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hp, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(master).Build()).AsStrSlice()
	if err != nil || len(hp) != 2 {
		return ""
	}
	return hp[0] + ":" + hp[1]
}

// agreedPrimary is the primary every sentinel reports, "" while they
// disagree or one does not answer.
func agreedPrimary(sent []rueidis.Client, master string) string {
	var p string
	for i, c := range sent {
		a := primaryOf(c, master)
		if a == "" || (i > 0 && a != p) {
			return ""
		}
		p = a
	}
	return p
}

// dataNode is a primary or replica scripts/redis.sh started.
type dataNode struct {
	name string
	pid  int
	args []string
}

// nodeAt finds the data node listening on addr's port in the state dir.
func nodeAt(t *testing.T, e env, addr string) dataNode {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	files, _ := filepath.Glob(filepath.Join(e.state, "failover-*.port"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != port {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".port")
		pb, err := os.ReadFile(filepath.Join(e.state, name+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(pb)))
		if err != nil {
			t.Fatalf("%s.pid: %v", name, err)
		}
		ab, err := os.ReadFile(filepath.Join(e.state, name+".args"))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(strings.TrimSuffix(string(ab), "\x00"), "\x00")
		return dataNode{name: name, pid: pid, args: args}
	}
	t.Fatalf("no data node of %s listens on %s", e.state, addr)
	return dataNode{}
}

// checkPID makes sure pid is the redis-server answering on addr before it
// is signalled (guards against a stale pid file or pid reuse).
func checkPID(t *testing.T, addr string, pid int) {
	t.Helper()
	info, err := redisfault.Command(addr, time.Second, "INFO", "server")
	if err != nil {
		t.Fatalf("INFO server on %s: %v", addr, err)
	}
	if v, _ := redisfault.InfoField(info, "process_id"); v != strconv.Itoa(pid) {
		t.Fatalf("%s answers as process %s, the pid file says %d: not signalling it", addr, v, pid)
	}
}

// TestSentinelFailover kills the primary (SIGKILL, by PID) while 200
// decisions per second go through a Limiter on a Store built from a
// Sentinel URL, and checks that decisions are answered by the promoted
// replica within the failover time (until every sentinel reports the new
// primary) plus 1 s, and that no key on the new primary lacks a TTL. The
// killed server is then started again as a replica, so the set can fail
// over again.
func TestSentinelFailover(t *testing.T) {
	e := getEnv(t)
	// Held until the killed server is a replica again (the Cleanup below
	// runs first): other packages' tests use the set meanwhile.
	redistest.LockSentinel(t)
	sent := make([]rueidis.Client, len(e.sentinels))
	for i, a := range e.sentinels {
		sent[i] = nodeClient(t, a)
	}
	oldPrimary := agreedPrimary(sent, e.master)
	if oldPrimary == "" {
		t.Fatalf("the sentinels %v do not agree on a primary for %q", e.sentinels, e.master)
	}
	victim := nodeAt(t, e, oldPrimary)
	checkPID(t, oldPrimary, victim.pid)

	url := "redis://" + e.sentinels[0] + "?master_set=" + e.master
	for _, s := range e.sentinels[1:] {
		url += "&addr=" + s
	}
	store, err := redisstore.NewFromURL(url, redisstore.WithTimeout(storeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	prefix := fmt.Sprintf("qgsentinel%d", time.Now().UnixNano())
	lim, err := limit.New(store, limit.Policy{Name: "failover", Limit: 1000, Window: time.Minute},
		limit.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	var n, degraded atomic.Int64
	load := redisfault.StartLoad(t, rate, func(ctx context.Context) error {
		d, err := lim.Consume(ctx, "client-"+strconv.FormatInt(n.Add(1)%200, 10))
		if err != nil {
			degraded.Add(1) // decided by the FailureMode (FailOpen), not by Redis
			return err
		}
		if d.Outcome == limit.OutcomeDegraded {
			return fmt.Errorf("degraded without an error")
		}
		return nil
	})
	load.WaitAnswered(rate, 20*time.Second)

	t.Logf("killing the primary %s (%s, pid %d) under %d decisions/s", oldPrimary, victim.name, victim.pid, rate)
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", victim.pid, err)
	}
	killed := load.Mark()
	// Bring the killed server back as a replica whatever happens next, so
	// the set can fail over again (it is daemonized with its own pid file:
	// scripts/redis.sh down stops it).
	var newPrimary string
	t.Cleanup(func() { restartAsReplica(t, e, victim, &newPrimary, sent) })

	deadline := time.Now().Add(60 * time.Second)
	for {
		if p := agreedPrimary(sent, e.master); p != "" && p != oldPrimary {
			newPrimary = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover within 60 s: the sentinels still report %s", oldPrimary)
		}
		time.Sleep(10 * time.Millisecond) // polling the sentinels
	}
	failover := time.Since(killed)
	resumed := load.WaitFirstAnswer(60 * time.Second).Sub(killed)
	failedBefore := load.Failed()
	load.WaitAnswered(rate, 20*time.Second)
	load.Stop()
	t.Logf("failover to %s took %v (until every sentinel reported it); decisions answered by Redis again %v after the kill; "+
		"%d decisions fell back to the FailureMode meanwhile, %d after the first answer",
		newPrimary, failover.Round(time.Millisecond), resumed.Round(time.Millisecond), failedBefore, load.Failed()-failedBefore)
	if resumed > failover+resumeMargin {
		t.Errorf("decisions resumed %v after the kill, want within the failover time %v + %v", resumed, failover, resumeMargin)
	}

	// Every key the limiter wrote on the new primary has a TTL.
	c := nodeClient(t, newPrimary)
	ctx := context.Background()
	var cursor uint64
	keys := 0
	for {
		se, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN %s: %v", newPrimary, err)
		}
		for _, k := range se.Elements {
			keys++
			ms, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatalf("PTTL %s: %v", k, err)
			}
			if ms == -1 {
				t.Errorf("key %q has no TTL on the new primary", k)
			}
		}
		if cursor = se.Cursor; cursor == 0 {
			break
		}
	}
	if keys == 0 {
		t.Fatalf("no key under %s on the new primary %s: the decisions did not reach it", prefix, newPrimary)
	}
	t.Logf("%d keys on the new primary, every one with a TTL", keys)
}

// restartAsReplica starts the killed node again with its original
// arguments as a replica of the new primary and waits until every sentinel
// counts it as a replica again.
func restartAsReplica(t *testing.T, e env, n dataNode, newPrimary *string, sent []rueidis.Client) {
	args := append([]string(nil), n.args...)
	if *newPrimary != "" {
		host, port, _ := strings.Cut(*newPrimary, ":")
		args = append(args, "--replicaof", host, port)
	}
	var out bytes.Buffer
	cmd := exec.Command(e.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil { // --daemonize yes: returns once forked
		t.Errorf("restarting %s: %v: %s", n.name, err, out.String())
		return
	}
	if *newPrimary == "" {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := 0
		for _, c := range sent {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := c.Do(ctx, c.B().Arbitrary("SENTINEL", "MASTER").Args(e.master).Build()).AsStrMap()
			cancel()
			if err == nil && m["num-slaves"] == "1" && !strings.Contains(m["flags"], "down") {
				ok++
			}
		}
		if ok == len(sent) {
			// The replica link must be up too, and the sentinels must no
			// longer flag the restarted node as down.
			if replicasUp(sent[0], e.master) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("%s restarted as a replica of %s, but the sentinels do not see it as an up replica after 30 s", n.name, *newPrimary)
			return
		}
		time.Sleep(50 * time.Millisecond) // polling the sentinels
	}
}

// replicasUp reports whether the sentinel lists one replica, not down,
// with its link to the primary up.
func replicasUp(c rueidis.Client, master string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rs, err := c.Do(ctx, c.B().SentinelReplicas().Master(master).Build()).ToArray()
	if err != nil || len(rs) != 1 {
		return false
	}
	m, err := rs[0].AsStrMap()
	return err == nil && !strings.Contains(m["flags"], "down") && !strings.Contains(m["flags"], "disconnected") &&
		m["master-link-status"] == "ok"
}
