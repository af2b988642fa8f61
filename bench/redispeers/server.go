package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// server is a redis-server this program started: a child process on a free
// loopback port, stopped by its PID.
type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

// redisBin is the redis-server to start: $QUOTAGATE_REDIS_SERVER_BIN, else
// the one on PATH.
func redisBin() (string, error) {
	if b := os.Getenv("QUOTAGATE_REDIS_SERVER_BIN"); b != "" {
		return b, nil
	}
	return exec.LookPath("redis-server")
}

// startServer starts redis-server with persistence off on a free loopback
// port and waits until it answers PING.
func startServer(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "quotagate-bench-redis-")
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--daemonize", "no", "--dir", dir, "--loglevel", "warning")
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting %s: %w", bin, err)
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir}
		if s.waitPing(5 * time.Second) {
			return s, nil
		}
		s.stop() // the port was taken in between: try another
	}
	os.RemoveAll(dir)
	return nil, errors.New("redis-server did not answer PING on a free port (3 attempts)")
}

func (s *server) waitPing(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, werr := c.Write([]byte("PING\r\n"))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if werr == nil && rerr == nil && strings.HasPrefix(line, "+PONG") {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond) // waiting for the child to listen, not timing anything
	}
	return false
}

// stop sends SIGTERM to the child's PID and waits for it (SIGKILL after 5 s).
func (s *server) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(s.dir)
}

// cpu returns the server process's user+system CPU time so far.
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name in parentheses; utime and stime are the
	// 14th and 15th fields, in clock ticks (100 per second on Linux).
	str := string(b)
	f := strings.Fields(str[strings.LastIndexByte(str, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", str)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: %q", str)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats: calls and usec per command.
func commandStats(ctx context.Context, c rueidis.Client) (map[string]cmdStat, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_evalsha:calls=300,usec=1234,usec_per_call=4.11,...
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out, nil
}

// harnessCommands are the commands the harness itself sends between runs;
// they are not counted per decision.
var harnessCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config": true, "ping": true, "hello": true,
	"client|setinfo": true, "client|setname": true, "client": true, "flushall": true, "select": true,
	"script|load": true, "script": true, "command": true, "cluster|slots": true, "cluster": true,
}

// scriptCommands run a script: their usec includes the commands the script
// runs, which commandstats also lists on their own lines.
var scriptCommands = map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "fcall": true, "fcall_ro": true}
