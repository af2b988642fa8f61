package redisfault

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of the test's own: masters, each with its
// replicas, every node a Server of this package (so it can be killed,
// frozen or restarted by PID). Slots are split evenly between the masters
// in order. Stopped when the test ends.
type Cluster struct {
	// Masters are the nodes that served the slots when the Cluster came
	// up, in slot order: Masters[0] the lowest slots.
	Masters []*Server
	// Replicas[i] are Masters[i]'s replicas.
	Replicas [][]*Server
}

// clusterTimeout bounds how long a new Cluster may take to agree on its
// state.
const clusterTimeout = 20 * time.Second

// StartCluster starts masters x (1 + replicas) cluster-enabled servers
// (cluster-node-timeout nodeTimeout; extra arguments after it) and joins
// them: slots split evenly, each replica following its master, every
// node reporting cluster_state:ok and every replica's link up. It skips t
// when EnvServerBin is not set.
func StartCluster(t testing.TB, masters, replicas int, nodeTimeout time.Duration, extra ...string) *Cluster {
	t.Helper()
	args := append([]string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
	}, extra...)
	c := &Cluster{}
	var all []*Server
	for range masters {
		c.Masters = append(c.Masters, startClusterNode(t, args))
		all = append(all, c.Masters[len(c.Masters)-1])
	}
	for range masters {
		var rs []*Server
		for range replicas {
			rs = append(rs, startClusterNode(t, args))
			all = append(all, rs[len(rs)-1])
		}
		c.Replicas = append(c.Replicas, rs)
	}
	for i, s := range all {
		mustCommand(t, s.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
	}
	for i, m := range c.Masters {
		from, to := i*16384/masters, (i+1)*16384/masters-1
		mustCommand(t, m.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(from), strconv.Itoa(to))
	}
	for _, s := range all[1:] {
		mustCommand(t, all[0].Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port()))
	}
	deadline := time.Now().Add(clusterTimeout)
	want := "cluster_known_nodes:" + strconv.Itoa(len(all))
	for _, s := range all {
		waitInfo(t, s.Addr(), deadline, func() string { return mustCommand(t, s.Addr(), "CLUSTER", "INFO") }, want)
	}
	for i, rs := range c.Replicas {
		id := mustCommand(t, c.Masters[i].Addr(), "CLUSTER", "MYID")
		for _, r := range rs {
			mustCommand(t, r.Addr(), "CLUSTER", "REPLICATE", id)
		}
	}
	for _, s := range all {
		waitInfo(t, s.Addr(), deadline, func() string { return mustCommand(t, s.Addr(), "CLUSTER", "INFO") }, "cluster_state:ok")
	}
	for _, rs := range c.Replicas {
		for _, r := range rs {
			waitInfo(t, r.Addr(), deadline, func() string { return mustCommand(t, r.Addr(), "INFO", "replication") }, "master_link_status:up")
		}
	}
	return c
}

// Addrs are every node's "127.0.0.1:PORT", masters first.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, m := range c.Masters {
		a = append(a, m.Addr())
	}
	for _, rs := range c.Replicas {
		for _, r := range rs {
			a = append(a, r.Addr())
		}
	}
	return a
}

// IsMaster reports whether s answers INFO replication with role:master
// (false when it does not answer).
func IsMaster(s *Server) bool {
	info, err := s.Command(time.Second, "INFO", "replication")
	if err != nil {
		return false
	}
	v, _ := InfoField(info, "role")
	return v == "master"
}

// startClusterNode starts a Server whose cluster bus port (port + 10000)
// is a valid port too.
func startClusterNode(t testing.TB, args []string) *Server {
	t.Helper()
	s := &Server{t: t, bin: ServerBin(t), dir: t.TempDir(), args: args}
	t.Cleanup(s.Stop)
	for attempt := 0; attempt < 20; attempt++ {
		if s.port = FreePort(t); s.port > 55535 {
			continue
		}
		if s.start() {
			return s
		}
	}
	t.Fatalf("redisfault: no cluster node came up on a free port after 20 attempts")
	return nil
}

func mustCommand(t testing.TB, addr string, args ...string) string {
	t.Helper()
	v, err := Command(addr, 5*time.Second, args...)
	if err != nil {
		t.Fatalf("redisfault: %s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return v
}

// waitInfo polls get until its text has the line want, or fails t at
// deadline.
func waitInfo(t testing.TB, addr string, deadline time.Time, get func() string, want string) {
	t.Helper()
	for {
		got := get()
		for _, l := range strings.Split(got, "\n") {
			if strings.TrimRight(l, "\r") == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redisfault: %s never reported %q; last:\n%s", addr, want, got)
		}
		time.Sleep(20 * time.Millisecond) // polling a cluster that agrees by gossip
	}
}
