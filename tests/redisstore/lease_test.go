package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// The Leaser contract on every backend, at a caller's clock: the limit, a
// renewal, expiry at the deadline, the key's time to live, and releases
// that free only the holder's own slots (twice, after expiry, another
// holder's token).
func TestLeaseScripts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		client := be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, client, prefix) })
		clock := limittest.NewClock(time.Now())
		s, err := New(client, WithClock(clock.Now), WithoutGuard())
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		key := prefix + ":{t}:conc:2p1c:r:k=a"
		op := func(tok byte, cost int64) limitstore.LeaseOp {
			o := limitstore.LeaseOp{Key: []byte(key), Cost: cost, Limit: 3, LeaseMS: 1000}
			o.Token[15] = tok
			return o
		}
		a, b, c, d := op(1, 2), op(2, 1), op(3, 1), op(4, 1)
		mustAcquire := func(o *limitstore.LeaseOp, allowed bool, held int64) {
			t.Helper()
			res, err := s.Acquire(ctx, o)
			if err != nil || res.Allowed != allowed || res.Held != held {
				t.Fatalf("token %d: %+v %v, want allowed %v held %d", o.Token[15], res, err, allowed, held)
			}
		}
		mustAcquire(&a, true, 2) // two slots
		mustAcquire(&b, true, 3)
		mustAcquire(&c, false, 3)
		if be.real {
			if ttl := pttl(t, client, key); ttl <= 1000 || ttl > 2000 {
				t.Fatalf("PTTL %d, want in (1000, 2000]: Lease + 1 s", ttl)
			}
		}
		clock.Advance(600 * time.Millisecond)
		mustAcquire(&a, true, 3) // a renews
		clock.Advance(400 * time.Millisecond)
		mustAcquire(&c, true, 3) // b expired at its deadline
		if freed, err := s.Release(ctx, &b); err != nil || freed {
			t.Fatalf("release after expiry: %v %v, want false", freed, err)
		}
		mustAcquire(&d, false, 3) // b's late release freed nothing
		if freed, _ := s.Release(ctx, &d); freed {
			t.Fatal("a token holding nothing freed a slot")
		}
		if freed, _ := s.Release(ctx, &a); !freed {
			t.Fatal("a's own release")
		}
		if freed, _ := s.Release(ctx, &a); freed {
			t.Fatal("double release")
		}
		mustAcquire(&d, true, 2)
		mustAcquire(&b, true, 3)
		mustAcquire(&a, false, 3)
		for _, o := range []*limitstore.LeaseOp{&b, &c, &d} {
			s.Release(ctx, o)
		}
		if n, err := client.Do(ctx, client.B().Exists().Key(key).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("EXISTS after the last release: %d %v, want 0", n, err)
		}
	})
}

// Environment of a fleet child process (TestConcurrencyFleetChild).
const (
	envFleetChild  = "QUOTAGATE_FLEET_CHILD"  // "standalone" or "cluster"
	envFleetPrefix = "QUOTAGATE_FLEET_PREFIX" // the key prefix
	envFleetMS     = "QUOTAGATE_FLEET_MS"     // how long to run (it also stops when stdin closes)
	envFleetLease  = "QUOTAGATE_FLEET_LEASE"  // Policy.Lease in ms
	envFleetHold   = "QUOTAGATE_FLEET_HOLD"   // how long a handler runs, ms (default 2)
)

// fleetLimit and fleetGoroutines are the fleet tests' numbers: 300
// goroutines per process on one identity with Limit 10.
const (
	fleetLimit      = 10
	fleetGoroutines = 300
)

// TestConcurrencyFleetChild is one process of the fleet tests: 300
// goroutines take slots of one identity, each handler INCRs a counter in
// Redis on entry and DECRs it on exit (so the count of handlers running
// across processes is Redis's own, in its order), and it prints the peak
// it saw and how many it served. It skips unless started by a fleet test.
func TestConcurrencyFleetChild(t *testing.T) {
	kind := os.Getenv(envFleetChild)
	if kind == "" {
		t.Skip("a fleet test's child process")
	}
	be := standaloneBackend(t)
	if kind == "cluster" {
		be = clusterBackend(t)
	}
	prefix := os.Getenv(envFleetPrefix)
	ms, _ := strconv.Atoi(os.Getenv(envFleetMS))
	leaseMS, _ := strconv.Atoi(os.Getenv(envFleetLease))
	hold := 2 * time.Millisecond
	if h, err := strconv.Atoi(os.Getenv(envFleetHold)); err == nil {
		hold = time.Duration(h) * time.Millisecond
	}
	client := be.newClient(t)
	s, err := New(client, WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limit.New(s, limit.Policy{Name: "fleet", Algorithm: limit.Concurrency, Limit: fleetLimit,
		Lease: time.Duration(leaseMS) * time.Millisecond}, limit.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	counter := prefix + ":{c}:running"
	stop := make(chan struct{})
	go func() { // stdin closed: stop
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(stop)
	}()
	deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
	var peak, served, errs atomic.Int64
	var wg sync.WaitGroup
	var holding sync.Once
	ctx := context.Background()
	fmt.Println("started")
	for range fleetGoroutines {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.Consume(ctx, "one")
				if err != nil {
					errs.Add(1)
				}
				if !d.Allowed || d.StoreFailed {
					time.Sleep(time.Millisecond)
					l.Finish(ctx, &d, 0)
					continue
				}
				n, err := client.Do(ctx, client.B().Incr().Key(counter).Build()).AsInt64()
				if err == nil {
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					holding.Do(func() { fmt.Println("holding") })
					select {
					case <-time.After(hold):
					case <-stop:
					}
					client.Do(ctx, client.B().Decr().Key(counter).Build())
					served.Add(1)
				}
				l.Finish(ctx, &d, 0)
			}
		})
	}
	wg.Wait()
	fmt.Printf("peak %d served %d errors %d\n", peak.Load(), served.Load(), errs.Load())
}

// fleet starts n child processes on backend kind running ms, with stdin
// pipes (closing one stops that child).
type fleetProc struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	out   *strings.Builder
	done  chan struct{} // closed when the process has ended
	err   error         // its exit, once done is closed
}

func startFleet(t *testing.T, kind, prefix string, n, ms, leaseMS int, holdMS ...int) []*fleetProc {
	t.Helper()
	var procs []*fleetProc
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrencyFleetChild$", "-test.v")
		cmd.Env = append(os.Environ(), envFleetChild+"="+kind, envFleetPrefix+"="+prefix,
			envFleetMS+"="+strconv.Itoa(ms), envFleetLease+"="+strconv.Itoa(leaseMS))
		if i < len(holdMS) {
			cmd.Env = append(cmd.Env, envFleetHold+"="+strconv.Itoa(holdMS[i]))
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out := &strings.Builder{}
		w := &lockedWriter{b: out} // one lock for both streams: they write from two goroutines
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &fleetProc{cmd: cmd, stdin: in, out: out, done: make(chan struct{})}
		go func() { p.err = cmd.Wait(); close(p.done) }()
		procs = append(procs, p)
		t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	}
	return procs
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (p *fleetProc) output() string { return p.cmd.Stdout.(*lockedWriter).String() }

// fleetMS is how long the exactness test runs: 5 s by default (the test
// suite's budget), QUOTAGATE_FLEET_SECONDS to run it longer (30 for the
// target's full length).
func fleetMS() int {
	if s, err := strconv.Atoi(os.Getenv("QUOTAGATE_FLEET_SECONDS")); err == nil && s > 0 {
		return s * 1000
	}
	return 5000
}

// The target: 3 processes x 300 goroutines on one identity with Limit 10,
// against one Redis and the Cluster. The handlers running at once, counted
// by the handlers themselves, never exceed 10; every slot is back when the
// load stops.
func TestConcurrencyFleetExact(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			be := standaloneBackend(t)
			if kind == "cluster" {
				be = clusterBackend(t)
			}
			client := be.newClient(t)
			prefix := testPrefix(t)
			t.Cleanup(func() { deleteKeys(t, client, prefix) })
			ms := fleetMS()
			procs := startFleet(t, kind, prefix, 3, ms, 2000)
			var total int64
			for i, p := range procs {
				select {
				case <-p.done:
				case <-time.After(time.Duration(ms)*time.Millisecond + 60*time.Second):
					t.Fatalf("process %d did not end", i)
				}
				out := p.output()
				var peak, served, errs int64
				line := out[strings.LastIndex(out, "peak "):]
				if _, err := fmt.Sscanf(line, "peak %d served %d errors %d", &peak, &served, &errs); err != nil {
					t.Fatalf("process %d: %v\n%s", i, err, out)
				}
				if peak > fleetLimit {
					t.Fatalf("process %d saw %d handlers running at once, Limit %d", i, peak, fleetLimit)
				}
				if served == 0 {
					t.Fatalf("process %d served nothing\n%s", i, out)
				}
				total += served
				t.Logf("process %d: peak %d, served %d, store errors %d", i, peak, served, errs)
			}
			if n := zcard(t, client, prefix); n != 0 {
				t.Fatalf("%d slots still held after the load stopped", n)
			}
			t.Logf("%d handlers served in %d ms across 3 processes", total, ms)
		})
	}
}

// The target: SIGKILL one of 3 loaded processes; the slots it held are
// back within Lease + 1 s.
func TestConcurrencyFleetKill(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			be := standaloneBackend(t)
			if kind == "cluster" {
				be = clusterBackend(t)
			}
			client := be.newClient(t)
			prefix := testPrefix(t)
			t.Cleanup(func() { deleteKeys(t, client, prefix) })
			const leaseMS = 1000
			// The first process's handlers run for a minute: it holds
			// slots (renewing them) when it is killed.
			procs := startFleet(t, kind, prefix, 3, 60_000, leaseMS, 60_000)
			for !strings.Contains(procs[0].output(), "holding") { // started and got a slot
				select {
				case <-procs[0].done:
					t.Fatalf("the first process ended before it held a slot\n%s", procs[0].output())
				case <-time.After(10 * time.Millisecond):
				}
			}
			time.Sleep(2500 * time.Millisecond) // past two renewals
			procs[0].cmd.Process.Signal(syscall.SIGKILL)
			killed := time.Now()
			<-procs[0].done
			for _, p := range procs[1:] { // the others stop and give theirs back
				p.stdin.Close()
			}
			for _, p := range procs[1:] {
				if <-p.done; p.err != nil {
					t.Fatalf("survivor: %v\n%s", p.err, p.output())
				}
			}
			held := zcard(t, client, prefix) // the killed process's
			if held == 0 {
				t.Fatalf("the killed process held no slot: the test measured nothing\n%s", procs[0].output())
			}
			for !allFree(t, client, prefix) {
				if time.Since(killed) > leaseMS*time.Millisecond+time.Second {
					t.Fatalf("%d slots still held %v after the SIGKILL, Lease %d ms", zcard(t, client, prefix), time.Since(killed), leaseMS)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("the killed process held %d slots when the survivors had stopped; all back %v after the SIGKILL (Lease %d ms)", held, time.Since(killed).Round(time.Millisecond), leaseMS)
		})
	}
}

// allFree reports that an Acquire of all fleetLimit slots succeeds now (it
// gives them back at once).
func allFree(t *testing.T, client rueidis.Client, prefix string) bool {
	s, err := New(client, WithoutGuard())
	if err != nil {
		t.Fatal(err)
	}
	op := limitstore.LeaseOp{Key: []byte(fleetKey(t, client, prefix)), Cost: fleetLimit, Limit: fleetLimit, LeaseMS: 1000}
	op.Token[0] = 0xee
	res, err := s.Acquire(ctxT(t), &op)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed {
		s.Release(ctxT(t), &op)
	}
	return res.Allowed
}

// fleetKey is the lease key of the fleet's identity (the only key under
// prefix besides the counter); "" before any was written.
func fleetKey(t *testing.T, client rueidis.Client, prefix string) string {
	for _, k := range scanKeys(t, client, prefix) {
		if strings.Contains(k, ":fleet:") {
			return k
		}
	}
	return prefix + ":{none}:fleet"
}

// zcard is the number of slots held (members, expired or not) under the
// fleet's lease key.
func zcard(t *testing.T, client rueidis.Client, prefix string) int64 {
	k := fleetKey(t, client, prefix)
	n, err := client.Do(context.Background(), client.B().Zcard().Key(k).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A holder whose work runs 3x its Lease keeps its slot on Redis: it
// renews the lease (one Acquire every Lease/3), and no other request
// takes the slot meanwhile.
func TestConcurrencyLeaseRenewal(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			be := standaloneBackend(t)
			if kind == "cluster" {
				be = clusterBackend(t)
			}
			client := be.newClient(t)
			prefix := testPrefix(t)
			t.Cleanup(func() { deleteKeys(t, client, prefix) })
			s, err := New(client, WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const lease = 600 * time.Millisecond
			l, err := limit.New(s, limit.Policy{Name: "renew", Algorithm: limit.Concurrency, Limit: 1, Lease: lease}, limit.WithKeyPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			held, _ := l.Consume(ctx, "k")
			if !held.Allowed {
				t.Fatal("first Consume refused")
			}
			start := time.Now()
			refused := 0
			for time.Since(start) < 3*lease {
				d, err := l.Consume(ctx, "k")
				if d.Allowed {
					t.Fatalf("after %v (Lease %v, err %v): another request took the held slot", time.Since(start), lease, err)
				}
				refused++
				time.Sleep(20 * time.Millisecond)
			}
			l.Finish(ctx, &held, 0)
			d, _ := l.Consume(ctx, "k")
			if !d.Allowed {
				t.Fatal("the slot is not free after Finish")
			}
			l.Finish(ctx, &d, 0)
			t.Logf("%d requests refused over %v", refused, 3*lease)
		})
	}
}
