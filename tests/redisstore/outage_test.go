package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	. "github.com/quotagate/quotagate/stores/redis"
)

// redisProc is a redis-server this test started (not daemonized: it is our
// child, stopped by its pid and waited for).
type redisProc struct {
	t      testing.TB
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts bin on port (0: a free one) and waits until it answers
// PING. It is stopped at the end of the test if still running.
func startRedis(t testing.TB, bin string, port int) *redisProc {
	t.Helper()
	for attempt := 0; attempt < 3; attempt++ {
		p := port
		if p == 0 {
			p = freePort(t)
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(p), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		r := &redisProc{t: t, port: p, cmd: cmd, exited: make(chan struct{})}
		go func() { cmd.Wait(); close(r.exited) }()
		if r.waitPing(5 * time.Second) {
			t.Cleanup(r.stop)
			return r
		}
		r.stop()
		if port != 0 {
			break // a fixed port that does not come up is a failure
		}
	}
	t.Fatalf("redis-server did not come up on port %d", port)
	return nil
}

func (r *redisProc) url() string { return "redis://127.0.0.1:" + strconv.Itoa(r.port) }

// waitPing polls PING until it is answered by our process or d passes.
func (r *redisProc) waitPing(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			return false
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(r.port), 100*time.Millisecond); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line == "+PONG\r\n" {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a starting process
	}
	return false
}

// stop ends the process (SIGCONT first if paused, SIGTERM, SIGKILL after
// 5 s) and waits for it. Idempotent.
func (r *redisProc) stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	if r.paused {
		r.resume()
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
}

func (r *redisProc) pause() {
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Fatalf("SIGSTOP: %v", err)
	}
	r.paused = true
}

func (r *redisProc) resume() {
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.t.Fatalf("SIGCONT: %v", err)
	}
	r.paused = false
}

// outage bounds: every call returns within the store timeout plus a margin
// for scheduling (the tests run under -race on shared CPUs).
const (
	outageTimeout = 100 * time.Millisecond
	outageMargin  = 150 * time.Millisecond
)

// outageLimiters are one limiter per FailureMode on one store.
type outageLimiters struct {
	modes [3]limit.FailureMode
	lims  [3]*limit.Limiter
}

const outageQuota = 5

func newOutageLimiters(t *testing.T, s *Store) *outageLimiters {
	local, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	o := &outageLimiters{modes: [3]limit.FailureMode{limit.FailOpen, limit.FailLocal, limit.FailClosed}}
	prefix := testPrefix(t)
	for i, m := range o.modes {
		opts := []limit.Option{limit.WithKeyPrefix(prefix)}
		if m == limit.FailLocal {
			opts = append(opts, limit.WithLocalStore(local))
		}
		o.lims[i] = limittest.MustNew(s, limit.Policy{
			Name: "outage-" + m.String(), Limit: outageQuota, Window: time.Minute, FailureMode: m,
		}, append(opts, limit.WithKeyPrefix("outage"))...)
	}
	return o
}

// load calls every limiter from several goroutines until stop is closed,
// recording the slowest call and counting successes and failures.
type load struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	ok, bad atomic.Int64
	slowest atomic.Int64 // ns
	panics  atomic.Int64
	wrong   atomic.Value // first outcome that contradicts the failure mode
	slowErr atomic.Value // the error of the first call over the bound
}

func startLoad(o *outageLimiters, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for w := range workers {
		i := w % len(o.lims)
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				t0 := time.Now()
				// A new identity per call: a repeated one is soon denied by
				// the limiter's local deny cache, which answers without
				// Redis, and "ok" must count calls Redis answered.
				d, err := o.lims[i].Consume(context.Background(), fmt.Sprintf("w%d-%d", w, n))
				el := time.Since(t0)
				for {
					s := l.slowest.Load()
					if int64(el) <= s || l.slowest.CompareAndSwap(s, int64(el)) {
						break
					}
				}
				if err == nil {
					l.ok.Add(1)
					continue
				}
				if el > outageTimeout+outageMargin {
					l.slowErr.CompareAndSwap(nil, fmt.Sprintf("%v after %v", err, el))
				}
				l.bad.Add(1)
				if strings.Contains(err.Error(), "limit: store panicked") {
					l.panics.Add(1)
				}
				if msg := checkFailureOutcome(o.modes[i], d); msg != "" {
					l.wrong.CompareAndSwap(nil, msg)
				}
				// Pacing, not timing: a failed-over call returns at once
				// (ErrNotConnected, connection refused) and 12 workers
				// spinning on 2 shared cores would measure the scheduler.
				time.Sleep(time.Millisecond)
			}
		})
	}
	return l
}

// checkFailureOutcome says what is wrong with a decision taken while the
// store failed, "" when it follows the mode.
func checkFailureOutcome(m limit.FailureMode, d limit.Decision) string {
	switch m {
	case limit.FailOpen:
		if !d.Allowed || d.Outcome != limit.OutcomeDegraded {
			return fmt.Sprintf("FailOpen: Allowed %v outcome %s, want admitted as degraded", d.Allowed, d.Outcome)
		}
	case limit.FailClosed:
		if d.Allowed || d.Outcome != limit.OutcomeLimited || d.RetryAfter != time.Second {
			return fmt.Sprintf("FailClosed: Allowed %v outcome %s RetryAfter %v, want rejected, limited, 1s", d.Allowed, d.Outcome, d.RetryAfter)
		}
	case limit.FailLocal:
		if (d.Allowed && d.Outcome != limit.OutcomeDegraded) || (!d.Allowed && d.Outcome != limit.OutcomeLimited) {
			return fmt.Sprintf("FailLocal: Allowed %v outcome %s, want degraded or limited", d.Allowed, d.Outcome)
		}
	}
	return ""
}

// waitCount waits until f() >= n (bounded): the load is observed, not timed.
func waitCount(t *testing.T, what string, f func() int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for f() < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s: %d of %d", what, f(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// end stops the load and checks what it saw.
func (l *load) end(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	slow := time.Duration(l.slowest.Load())
	t.Logf("load: %d calls answered by Redis, %d failed over; slowest call %v (bound %v)",
		l.ok.Load(), l.bad.Load(), slow, outageTimeout+outageMargin)
	if slow > outageTimeout+outageMargin {
		t.Errorf("a call took %v, more than the store timeout %v plus %v (failed call: %v)", slow, outageTimeout, outageMargin, l.slowErr.Load())
	}
	if n := l.panics.Load(); n != 0 {
		t.Errorf("%d calls ended in a store panic", n)
	}
	if w := l.wrong.Load(); w != nil {
		t.Errorf("decision during the outage: %s", w)
	}
}

// checkCounting asserts that a fresh identity gets exactly the quota from
// Redis (no error, no degraded outcome) on every limiter.
func checkCounting(t *testing.T, o *outageLimiters, id string) {
	t.Helper()
	ctx := ctxT(t)
	for i, l := range o.lims {
		for n := range outageQuota + 2 {
			d, err := l.Consume(ctx, id)
			if err != nil {
				t.Fatalf("%v: call %d after recovery: %v", o.modes[i], n, err)
			}
			if want := n < outageQuota; d.Allowed != want || d.Outcome == limit.OutcomeDegraded {
				t.Fatalf("%v: call %d after recovery: Allowed %v outcome %s, want Allowed %v from Redis", o.modes[i], n, d.Allowed, d.Outcome, want)
			}
		}
	}
}

// waitRecovered waits until a call on every limiter is answered by Redis.
func waitRecovered(t *testing.T, o *outageLimiters) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i, l := range o.lims {
		for {
			_, err := l.Consume(context.Background(), "probe")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: Redis not answering 20 s after recovery: %v", o.modes[i], err)
			}
			time.Sleep(10 * time.Millisecond) // polling for the reconnect
		}
	}
}

// TestOutage runs the engine's failure modes against this store and a
// redis-server of our own: stopped mid-run and restarted, unreachable at
// start (closed port) then started, hung with SIGSTOP then resumed. No call
// waits longer than the timeout plus a margin, none panics, each decision
// follows its FailureMode, and counting resumes exactly afterwards.
func TestOutage(t *testing.T) {
	bin := skipNoEnv(t, envServer, "outage (own redis-server processes)")
	const workers = 12

	t.Run("stopped-mid-run", func(t *testing.T) {
		srv := startRedis(t, bin, 0)
		s, err := NewFromURL(srv.url(), WithTimeout(outageTimeout))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		o := newOutageLimiters(t, s)
		checkCounting(t, o, "before")
		l := startLoad(o, workers)
		waitCount(t, "calls before the stop", l.ok.Load, 200)
		srv.stop()
		waitCount(t, "failed-over calls", l.bad.Load, 300)
		startRedis(t, bin, srv.port) // stopped by its cleanup
		okAt := l.ok.Load()
		waitCount(t, "calls after the restart", l.ok.Load, okAt+300)
		l.end(t)
		checkCounting(t, o, "after")
	})

	t.Run("closed-port-at-start", func(t *testing.T) {
		port := freePort(t)
		t0 := time.Now()
		s, err := NewFromURL("redis://127.0.0.1:"+strconv.Itoa(port), WithTimeout(outageTimeout))
		if err != nil {
			t.Fatalf("NewFromURL with Redis down: %v (want a Store that connects later)", err)
		}
		defer s.Close()
		t.Logf("NewFromURL returned in %v with Redis down", time.Since(t0))
		if err := s.Ping(context.Background()); !errors.Is(err, ErrNotConnected) {
			t.Fatalf("Ping before Redis exists: %v, want ErrNotConnected", err)
		}
		o := newOutageLimiters(t, s)
		l := startLoad(o, workers)
		waitCount(t, "failed-over calls", l.bad.Load, 300)
		if _, err := o.lims[0].Consume(context.Background(), "x"); !errors.Is(err, ErrNotConnected) {
			t.Errorf("Consume before Redis exists: %v, want ErrNotConnected", err)
		}
		startRedis(t, bin, port)
		waitCount(t, "calls after Redis started", l.ok.Load, 300)
		l.end(t)
		checkCounting(t, o, "after")
	})

	t.Run("hung-SIGSTOP", func(t *testing.T) {
		srv := startRedis(t, bin, 0)
		s, err := NewFromURL(srv.url(), WithTimeout(outageTimeout))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		o := newOutageLimiters(t, s)
		checkCounting(t, o, "before")
		l := startLoad(o, workers)
		waitCount(t, "calls before SIGSTOP", l.ok.Load, 200)
		srv.pause()
		// Long enough for rueidis to give up on the connection (1 s write
		// timeout) and try to redial a server that accepts but never answers.
		badAt := l.bad.Load()
		waitCount(t, "failed-over calls", l.bad.Load, badAt+int64(workers)*20)
		srv.resume()
		waitRecovered(t, o)
		okAt := l.ok.Load()
		waitCount(t, "calls after SIGCONT", l.ok.Load, okAt+300)
		l.end(t)
		checkCounting(t, o, "after")
	})
}
