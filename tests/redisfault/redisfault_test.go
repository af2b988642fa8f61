package redisfault

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ping answers "PONG" or the error of a PING bounded by timeout.
func ping(addr string, timeout time.Duration) error {
	_, err := Command(addr, timeout, "PING")
	return err
}

func TestServerStartsOnItsOwnPID(t *testing.T) {
	s := Start(t)
	pid, err := s.processID(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if pid != s.PID() {
		t.Fatalf("INFO process_id %d, started pid %d", pid, s.PID())
	}
	if got, err := s.Command(time.Second, "SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET: %q %v", got, err)
	}
	if got, err := s.Command(time.Second, "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET: %q %v", got, err)
	}
	if _, err := s.Command(time.Second, "NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("an error reply comes back as an error, got %v", err)
	}
}

func TestFreezeThaw(t *testing.T) {
	s := Start(t)
	s.Freeze()
	t0 := time.Now()
	if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("PING answered by a frozen server")
	}
	if el := time.Since(t0); el < 200*time.Millisecond {
		t.Fatalf("PING to a frozen server failed after %v, want a timeout (it must accept and hang)", el)
	}
	s.Thaw()
	if err := ping(s.Addr(), 5*time.Second); err != nil {
		t.Fatalf("PING after Thaw: %v", err)
	}
}

func TestDebugSleepBlocksOthers(t *testing.T) {
	s := Start(t)
	const d = 300 * time.Millisecond
	s.DebugSleep(d)
	t0 := time.Now()
	if err := ping(s.Addr(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	el := time.Since(t0)
	t.Logf("PING during DEBUG SLEEP %v answered after %v", d, el)
	if el < d/2 {
		t.Fatalf("PING answered after %v during DEBUG SLEEP %v: the server was not busy", el, d)
	}
}

func TestKillRestart(t *testing.T) {
	s := Start(t)
	pid := s.PID()
	s.Kill()
	if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if s.PID() == pid {
		t.Fatalf("Restart kept pid %d", pid)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if got, _ := s.processID(time.Second); got != s.PID() {
		t.Fatalf("after Restart INFO process_id %d, pid %d", got, s.PID())
	}
}

func TestConnectionsReceivedCountsAccepts(t *testing.T) {
	s := Start(t)
	before := s.ConnectionsReceived()
	for range 3 {
		if err := ping(s.Addr(), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// 3 PINGs + the second INFO's own connection.
	if got := s.ConnectionsReceived() - before; got != 4 {
		t.Fatalf("total_connections_received grew by %d, want 4", got)
	}
}

func TestProxyDelaysReplies(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr())
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	const d = 150 * time.Millisecond
	p.SetDelay(d)
	t0 := time.Now()
	if err := ping(p.Addr(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < d {
		t.Fatalf("PING through a %v proxy answered after %v", d, el)
	}
	if _, err := Command(p.Addr(), d/2, "PING"); err == nil {
		t.Fatalf("PING with a deadline of %v answered through a %v proxy", d/2, d)
	}
	p.SetDelay(0)
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatal(err)
	}
	if got := p.Accepted(); got != 4 {
		t.Fatalf("proxy accepted %d connections, want 4", got)
	}
}

func TestProxyDelayIsPerChunkNotCumulative(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr())
	const d = 100 * time.Millisecond
	p.SetDelay(d)
	// 20 PINGs sent one after another on one connection, each waiting for
	// its reply: 20 x d. Pipelined in one write, they come back in about one
	// d, because replies are delayed from their arrival, not queued behind
	// each other's delays.
	const n = 20
	var cmds []byte
	for range n {
		cmds = append(cmds, encode("PING")...)
	}
	c := dial(t, p.Addr())
	t0 := time.Now()
	if _, err := c.Write(cmds); err != nil {
		t.Fatal(err)
	}
	got := 0
	buf := make([]byte, 1024)
	for got < n*len("+PONG\r\n") {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if el := time.Since(t0); el < d || el > n*d/2 {
		t.Fatalf("%d pipelined PINGs through a %v proxy took %v, want between %v and %v", n, d, el, d, n*d/2)
	}
}

func TestProxyDropConns(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr())
	c := dial(t, p.Addr())
	// Wait until the proxy has registered the connection (it answers).
	if _, err := c.Write(encode("PING")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	p.DropConns()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("connection still open after DropConns")
	}
	if err := ping(p.Addr(), time.Second); err != nil {
		t.Fatalf("new connection after DropConns: %v", err)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n"
	for _, tc := range []struct {
		field, want string
		ok          bool
	}{
		{"process_id", "42", true},
		{"redis_version", "7.0.15", true},
		{"process", "", false},
		{"tcp_port", "", false},
	} {
		got, ok := InfoField(info, tc.field)
		if got != tc.want || ok != tc.ok {
			t.Errorf("InfoField(%q) = %q, %v; want %q, %v", tc.field, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFreePortIsFree(t *testing.T) {
	p := FreePort(t)
	if err := ping("127.0.0.1:"+strconv.Itoa(p), 100*time.Millisecond); err == nil {
		t.Fatalf("something answers on the free port %d", p)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
