// Package redisfault puts real redis-server processes into the faults a
// shared rate-limit store must survive, for tests: a server of the test's
// own on a free loopback port whose PID is known, frozen and thawed
// (SIGSTOP/SIGCONT), busy (DEBUG SLEEP), killed and restarted on the same
// port, and a loopback TCP proxy that delays every reply chunk by a
// duration that can change at run time and counts the connections it
// accepts.
//
// Everything is tied to a testing.TB: processes and listeners are stopped
// by t.Cleanup, and a test that cannot get a redis-server is skipped with a
// loud reason. Processes are signalled only by the PIDs this package
// started, never by name.
//
// The redis-server binary is QUOTAGATE_REDIS_SERVER_BIN (exported by
// scripts/test.sh when redis-server is on PATH).
package redisfault

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvServerBin names the redis-server binary (exported by scripts/test.sh).
const EnvServerBin = "QUOTAGATE_REDIS_SERVER_BIN"

// startTimeout bounds how long a starting server may take to answer PING.
const startTimeout = 10 * time.Second

// ServerBin returns the redis-server binary from EnvServerBin, or skips t
// with a loud reason when it is not set.
func ServerBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(EnvServerBin)
	if bin == "" {
		t.Skipf("!!! SKIPPED: %s is not set, so this real redis-server fault test did NOT run "+
			"(run `make test` with redis-server on PATH, or `scripts/redis.sh up DIR && . DIR/env`)", EnvServerBin)
	}
	return bin
}

// Server is a redis-server process started by this package: a child of
// the test process, listening on 127.0.0.1 only, persisting nothing, with
// DEBUG allowed from loopback. Its methods are safe for concurrent use; a
// method that cannot do what it says fails the test.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	frozen bool
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. Extra arguments go to redis-server after this package's
// own (e.g. "--maxmemory", "10mb"). The server is stopped when the test
// ends. Start skips t when EnvServerBin is not set.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: ServerBin(t), dir: t.TempDir(), args: extra}
	t.Cleanup(s.Stop)
	for attempt := 0; attempt < 5; attempt++ {
		s.port = FreePort(t)
		if s.start() {
			return s
		}
	}
	t.Fatalf("redisfault: redis-server did not come up on a free port after 5 attempts")
	return nil
}

// FreePort returns a loopback TCP port nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redisfault: finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs the process on s.port and waits for PING; false when it did
// not come up (the port was taken, or it exited).
func (s *Server) start() bool {
	s.t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--daemonize", "no", "--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", "", "--enable-debug-command", "local",
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redisfault: starting %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.frozen = cmd, exited, false
	s.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if pid, err := s.processID(200 * time.Millisecond); err == nil {
			if pid == cmd.Process.Pid {
				return true
			}
			s.kill(cmd, exited) // someone else answers on that port
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling a starting process
	}
	s.kill(cmd, exited)
	return false
}

// processID asks the server on s.port for INFO server's process_id.
func (s *Server) processID(timeout time.Duration) (int, error) {
	info, err := s.Command(timeout, "INFO", "server")
	if err != nil {
		return 0, err
	}
	v, ok := InfoField(info, "process_id")
	if !ok {
		return 0, errors.New("no process_id in INFO server")
	}
	return strconv.Atoi(v)
}

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Addr is "127.0.0.1:PORT".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is "redis://127.0.0.1:PORT".
func (s *Server) URL() string { return "redis://" + s.Addr() }

// PID is the process ID of the current process (it changes on Restart).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// signal sends sig to the running process; it fails the test when the
// process has exited.
func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
		s.t.Fatalf("redisfault: %v to pid %d: the server has exited", sig, s.cmd.Process.Pid)
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redisfault: %v to pid %d: %v", sig, s.cmd.Process.Pid, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		s.frozen = true
	case syscall.SIGCONT:
		s.frozen = false
	}
}

// Freeze stops the process (SIGSTOP): the kernel still accepts TCP
// connections into the listen backlog and buffers what clients send, but
// nothing is read or answered until Thaw.
func (s *Server) Freeze() { s.t.Helper(); s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process (SIGCONT); it then serves what queued up.
func (s *Server) Thaw() { s.t.Helper(); s.signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL and waits for it: connections are
// reset, nothing listens on the port until Restart.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	s.kill(cmd, exited)
}

func (s *Server) kill(cmd *exec.Cmd, exited chan struct{}) {
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts a new process on the same port after Kill (or Stop), with
// the same arguments, and waits until it answers. Data is not kept.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	deadline := time.Now().Add(startTimeout)
	for !s.start() {
		if time.Now().After(deadline) {
			s.t.Fatalf("redisfault: redis-server did not come back on port %d", s.port)
		}
		time.Sleep(50 * time.Millisecond) // the port may linger for a moment
	}
}

// Stop ends the process if it runs: SIGCONT when frozen, SIGTERM, SIGKILL
// after 5 s. Idempotent; registered with t.Cleanup by Start.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited, frozen := s.cmd, s.exited, s.frozen
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	if frozen {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		s.kill(cmd, exited)
	}
}

// DebugSleep makes the server busy for d (DEBUG SLEEP, which blocks its one
// command thread) without waiting for it: it returns once the command has
// been sent, and the reply is read in the background. Other clients' calls
// queue behind it; the process stays running (unlike Freeze).
func (s *Server) DebugSleep(d time.Duration) {
	s.t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		s.t.Fatalf("redisfault: DEBUG SLEEP: %v", err)
	}
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	if _, err := c.Write(encode("DEBUG", "SLEEP", secs)); err != nil {
		c.Close()
		s.t.Fatalf("redisfault: DEBUG SLEEP: %v", err)
	}
	go func() {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(d + 30*time.Second))
		_, _ = bufio.NewReader(c).ReadString('\n')
	}()
}

// ConnectionsReceived returns INFO stats total_connections_received: every
// connection the server accepted since it started (its own connection for
// this query included). Connections queued while it was frozen are counted
// once it has accepted them after Thaw.
func (s *Server) ConnectionsReceived() int64 {
	s.t.Helper()
	info, err := s.Command(5*time.Second, "INFO", "stats")
	if err != nil {
		s.t.Fatalf("redisfault: INFO stats: %v", err)
	}
	v, ok := InfoField(info, "total_connections_received")
	if !ok {
		s.t.Fatalf("redisfault: no total_connections_received in INFO stats")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.t.Fatalf("redisfault: total_connections_received %q: %v", v, err)
	}
	return n
}

// Command sends one command on a fresh connection of its own and returns
// the reply as text: a simple or bulk string, an integer in decimal, an
// error reply as an error. Arrays are not supported (not needed by the
// fault tests). The whole exchange is bounded by timeout.
func (s *Server) Command(timeout time.Duration, args ...string) (string, error) {
	return Command(s.Addr(), timeout, args...)
}

// Command is Server.Command for any address (a proxy, another server).
func Command(addr string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := c.Write(encode(args...)); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

// encode writes a command as a RESP array of bulk strings.
func encode(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// readReply reads one RESP2 reply that is not an array.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unsupported reply %q", line)
}

// InfoField returns the value of field in an INFO reply.
func InfoField(info, field string) (string, bool) {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
