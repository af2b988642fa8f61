package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeDialer hands out one end of a net.Pipe per dial and keeps the other
// (the "server" side) so the test decides whether a connection answers.
type fakeDialer struct {
	mu      sync.Mutex
	dials   int
	servers []net.Conn
	fail    error         // returned by the next dials when set
	hold    chan struct{} // when set, dials wait until it is closed (a slow dial)
}

func (f *fakeDialer) dial(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if f.fail != nil {
		return nil, f.fail
	}
	c, s := net.Pipe()
	f.servers = append(f.servers, s)
	return c, nil
}

func (f *fakeDialer) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.dials }

func (f *fakeDialer) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.servers {
		s.Close()
	}
}

// answer makes the server side of connection i send one byte, and reads it
// on c (so the gate sees the answer).
func (f *fakeDialer) answer(t *testing.T, i int, c net.Conn) {
	t.Helper()
	f.mu.Lock()
	s := f.servers[i]
	f.mu.Unlock()
	go s.Write([]byte{'+'})
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
}

type gateClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *gateClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *gateClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newTestGate(t *testing.T) (*dialGate, *fakeDialer, *gateClock) {
	f := &fakeDialer{}
	clk := &gateClock{t: time.Unix(1_700_000_000, 0)}
	g := newDialGate(f.dial)
	g.now = clk.now
	t.Cleanup(f.closeAll)
	return g, f, clk
}

const gateAddr = "127.0.0.1:6379"

func gateDial(g *dialGate, ctx context.Context) (net.Conn, error) {
	return g.dial(ctx, gateAddr, &net.Dialer{}, nil)
}

func mustGateDial(t *testing.T, g *dialGate) net.Conn {
	t.Helper()
	c, err := gateDial(g, context.Background())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDialGateAnsweringAddressDialsFreely(t *testing.T) {
	g, f, _ := newTestGate(t)
	for i := range 3 {
		c := mustGateDial(t, g)
		f.answer(t, i, c)
		c.Close() // an answered connection closing is no failure
	}
	if n := f.count(); n != 3 {
		t.Fatalf("%d dials, want 3", n)
	}
}

func TestDialGateUnansweredCloseBacksOff(t *testing.T) {
	g, f, clk := newTestGate(t)
	c := mustGateDial(t, g)
	clk.add(100 * time.Millisecond) // the handshake times out
	c.Close()
	for _, after := range []time.Duration{0, 400 * time.Millisecond, 400 * time.Millisecond} {
		clk.add(after)
		if _, err := gateDial(g, context.Background()); !errors.Is(err, ErrReconnectBackoff) {
			t.Fatalf("dial %v after an unanswered connection: %v, want ErrReconnectBackoff", after, err)
		}
	}
	if n := f.count(); n != 1 {
		t.Fatalf("%d dials during the backoff, want 1 (the first)", n)
	}
	// 100+0+400+400 = 900 ms since the failed attempt started; at 1 s the
	// next attempt goes through.
	clk.add(100 * time.Millisecond)
	c2 := mustGateDial(t, g)
	if n := f.count(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
	f.answer(t, 1, c2)
	mustGateDial(t, g) // answering again: no wait, no backoff
	if n := f.count(); n != 3 {
		t.Fatalf("%d dials after the address answered again, want 3", n)
	}
}

func TestDialGateFailedDialBacksOff(t *testing.T) {
	g, f, clk := newTestGate(t)
	f.fail = errors.New("connection refused")
	if _, err := gateDial(g, context.Background()); err == nil || errors.Is(err, ErrReconnectBackoff) {
		t.Fatalf("first dial: %v, want the dial's own error", err)
	}
	clk.add(999 * time.Millisecond)
	if _, err := gateDial(g, context.Background()); !errors.Is(err, ErrReconnectBackoff) {
		t.Fatalf("dial 999 ms after a refused one: %v, want ErrReconnectBackoff", err)
	}
	clk.add(time.Millisecond)
	if _, err := gateDial(g, context.Background()); err == nil || errors.Is(err, ErrReconnectBackoff) {
		t.Fatalf("dial 1 s after a refused one: %v, want a new attempt", err)
	}
	if n := f.count(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
	if !transient(ErrReconnectBackoff) {
		t.Fatal("ErrReconnectBackoff must count as transient (Dial keeps connecting)")
	}
}

// While one connection waits for its first answer, a second dial to an
// answering address waits for it (and then dials); to a failing address it
// fails at once.
func TestDialGateOneUnansweredAtATime(t *testing.T) {
	t.Run("answering-waits", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		c := mustGateDial(t, g)
		got := make(chan error, 1)
		go func() {
			c2, err := gateDial(g, context.Background())
			if err == nil {
				c2.Close()
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("second dial returned (%v) while the first had not answered", err)
		case <-time.After(50 * time.Millisecond): // it is blocked, as it should be
		}
		f.answer(t, 0, c)
		if err := <-got; err != nil {
			t.Fatalf("second dial after the first answered: %v", err)
		}
		if n := f.count(); n != 2 {
			t.Fatalf("%d dials, want 2", n)
		}
	})
	t.Run("answering-wait-bounded-by-ctx", func(t *testing.T) {
		g, _, _ := newTestGate(t)
		mustGateDial(t, g)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := gateDial(g, ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting dial: %v, want its context's deadline", err)
		}
	})
	t.Run("failing-fails-fast", func(t *testing.T) {
		g, f, clk := newTestGate(t)
		mustGateDial(t, g).Close() // unanswered: failing
		clk.add(time.Second)
		mustGateDial(t, g) // the probe, waiting for its answer
		if _, err := gateDial(g, context.Background()); !errors.Is(err, ErrReconnectBackoff) {
			t.Fatalf("dial while the probe waits: %v, want ErrReconnectBackoff at once", err)
		}
		if n := f.count(); n != 2 {
			t.Fatalf("%d dials, want 2", n)
		}
	})
}

// Addresses are independent: a failing sentinel does not hold back the
// primary.
func TestDialGatePerAddress(t *testing.T) {
	g, f, _ := newTestGate(t)
	mustGateDial(t, g).Close()
	if _, err := gateDial(g, context.Background()); !errors.Is(err, ErrReconnectBackoff) {
		t.Fatalf("%v, want ErrReconnectBackoff", err)
	}
	c, err := g.dial(context.Background(), "127.0.0.1:6380", &net.Dialer{}, nil)
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	c.Close()
	if n := f.count(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
}

// server returns the server side of connection i.
func (f *fakeDialer) server(i int) net.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[i]
}

// waitProbe waits until no attempt to gateAddr is pending (a confirmation
// in the background included).
func waitProbe(g *dialGate) {
	g.mu.Lock()
	var probe chan struct{}
	if st := g.addrs[gateAddr]; st != nil {
		probe = st.probe
	}
	g.mu.Unlock()
	if probe != nil {
		<-probe
	}
}

// A handshake cut short by the CALLER's context (a 1 ms deadline) is no
// evidence about the server: the attempt goes on in the background, and the
// server's answer keeps the address answering; a server that stays silent
// until the dial timeout, or resets the connection, still makes it back off.
func TestRegressionDialGateCallerCutIsNoEvidence(t *testing.T) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	// cutHandshake dials under a context it cancels before the server
	// answers, then closes, as rueidis does; serve (when not nil) plays the
	// server on the connection's other end.
	cutHandshake := func(t *testing.T, g *dialGate, f *fakeDialer, d *net.Dialer, write bool, serve func(net.Conn)) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		c, err := g.dial(ctx, gateAddr, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if serve != nil {
			go serve(f.server(f.count() - 1))
		}
		if write { // the handshake went out (the fake server reads it: net.Pipe is synchronous)
			if _, err := c.Write([]byte("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")); err != nil {
				t.Fatal(err)
			}
		}
		cancel() // the caller gives up before the answer
		c.Close()
	}
	readAndAnswer := func(s net.Conn) {
		s.Read(make([]byte, 64))
		s.Write([]byte{'+'})
	}
	t.Run("written-then-answered", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		cutHandshake(t, g, f, d, true, readAndAnswer)
		waitProbe(g)
		mustGateDial(t, g) // answering: a new attempt at once
		if n := f.count(); n != 2 {
			t.Fatalf("%d dials, want 2", n)
		}
	})
	t.Run("nothing-written-ping-answered", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		cutHandshake(t, g, f, d, false, readAndAnswer)
		waitProbe(g)
		mustGateDial(t, g)
	})
	t.Run("silent-until-dial-timeout", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		cutHandshake(t, g, f, &net.Dialer{Timeout: 20 * time.Millisecond}, false, nil) // the PING is never read
		waitProbe(g)
		if _, err := gateDial(g, context.Background()); !errors.Is(err, ErrReconnectBackoff) {
			t.Fatalf("dial after a silent attempt: %v, want ErrReconnectBackoff", err)
		}
		if n := f.count(); n != 1 {
			t.Fatalf("%d dials, want 1", n)
		}
	})
	t.Run("reset-is-evidence", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		ctx, cancel := context.WithCancel(context.Background())
		c, err := g.dial(ctx, gateAddr, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.server(0).Close()
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("read from a closed server: no error")
		}
		cancel()
		c.Close()
		if _, err := gateDial(g, context.Background()); !errors.Is(err, ErrReconnectBackoff) {
			t.Fatalf("dial after a reset: %v, want ErrReconnectBackoff", err)
		}
	})
	t.Run("dial-outlives-caller", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		f.hold = make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if _, err := g.dial(ctx, gateAddr, d, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow dial: %v, want the caller's deadline", err)
		}
		close(f.hold) // the dial completes after its caller left
		f.waitConns(t, 1)
		if f.count() == 1 {
			go readAndAnswer(f.server(0))
		}
		waitProbe(g)
		mustGateDial(t, g)
		if n := f.count(); n != 2 {
			t.Fatalf("%d dials, want 2", n)
		}
	})
	t.Run("caller-already-done-makes-no-attempt", func(t *testing.T) {
		g, f, _ := newTestGate(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := g.dial(ctx, gateAddr, d, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
		mustGateDial(t, g)
		if n := f.count(); n != 1 {
			t.Fatalf("%d dials, want 1 (none for the caller already done)", n)
		}
	})
}

// waitConns waits until n connections have been handed out (5 s at most).
func (f *fakeDialer) waitConns(t *testing.T, n int) {
	for deadline := time.Now().Add(5 * time.Second); ; {
		f.mu.Lock()
		k := len(f.servers)
		f.mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d connections dialed, want %d", k, n)
			return
		}
		time.Sleep(time.Millisecond) // polling the dial goroutine
	}
}

func TestParseURLInstallsTheGate(t *testing.T) {
	for _, url := range []string{"redis://127.0.0.1:1", "unix:///tmp/quotagate-none.sock", "redis://127.0.0.1:1?master_set=m"} {
		opt, err := ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		if opt.DialCtxFn == nil {
			t.Fatalf("%s: no DialCtxFn", url)
		}
	}
}
