package redisstore

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// evictionCheckTimeout bounds the reading of maxmemory-policy when a Store
// gets its client.
const evictionCheckTimeout = 2 * time.Second

// EvictionPolicy returns the maxmemory-policy the Store read from Redis
// when it got its client ("noeviction", "allkeys-lru", ...; on a Cluster
// the first node's that evicts, if any), and whether Redis may evict the
// limiter's keys under it: every allkeys-* and volatile-* policy may (every
// key the Store writes has a time to live, so the volatile-* policies take
// them first), and an evicted key hands its identity a fresh quota. ""
// when the policy could not be read (CONFIG disabled, not connected yet).
// Safe for concurrent use.
func (s *Store) EvictionPolicy() (policy string, evicts bool) {
	if p := s.eviction.Load(); p != nil {
		return *p, evicting(*p)
	}
	return "", false
}

// evicting reports whether Redis may evict keys with a TTL under policy.
func evicting(policy string) bool {
	return strings.HasPrefix(policy, "allkeys-") || strings.HasPrefix(policy, "volatile-")
}

// adopt prepares c and then makes it the Store's client: within
// evictionCheckTimeout in all, it reads maxmemory-policy and loads the
// scripts and opens the connections on every node (prepareNodes: the
// first decision then costs one EVALSHA on a connection already open, not
// a dial, a NOSCRIPT and an EVAL that a short store timeout would fail),
// and, on a guarded Cluster
// Store, reads the slots' masters (see cluster.go).
func (s *Store) adopt(c rueidis.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), evictionCheckTimeout)
	defer cancel()
	s.prepareNodes(ctx, c)
	if s.guard != nil && c.Mode() == rueidis.ClientModeCluster {
		s.startCluster(ctx, c)
	}
	s.client.Store(newClientRef(c))
	if s.guard != nil && s.clock == nil { // a deny cache to keep true (see resets.go)
		s.listen(ctx, c)
	}
}

// prepareNodes reads maxmemory-policy from every node of c (one on a
// standalone or Sentinel client), loads the scripts there (SCRIPT LOAD; a
// node that refuses it loads them on first use) and opens every pipelined
// connection to it (openWires), records the first policy that evicts (or
// any other), and logs once when Redis may evict the limiter's state.
func (s *Store) prepareNodes(ctx context.Context, c rueidis.Client) {
	nodes := c.Nodes()
	if len(nodes) == 0 {
		nodes = map[string]rueidis.Client{"": c}
	}
	policy, node := "", ""
	for addr, n := range nodes {
		cmds := rueidis.Commands{
			n.B().ConfigGet().Parameter("maxmemory-policy").Build(),
			n.B().ScriptLoad().Script(takeSource).Build(),
		}
		if batches(c) {
			cmds = append(cmds, n.B().ScriptLoad().Script(batchSource).Build())
		}
		m, err := n.DoMulti(ctx, cmds...)[0].AsStrMap()
		if err == nil {
			openWires(ctx, n, s.wires(c))
		}
		if err != nil || m["maxmemory-policy"] == "" {
			continue // CONFIG renamed or refused (managed Redis), or the node is away
		}
		if policy == "" || (evicting(m["maxmemory-policy"]) && !evicting(policy)) {
			policy, node = m["maxmemory-policy"], addr
		}
	}
	if policy == "" {
		return
	}
	s.eviction.Store(&policy)
	if evicting(policy) {
		s.logger.Warn("quotagate: Redis may evict rate-limit state (maxmemory-policy "+policy+"): an evicted key gives its client a fresh quota; "+
			"set maxmemory-policy noeviction (writes then fail when memory is full and the policy's FailureMode decides), or give the limiter a Redis of its own",
			slog.String("maxmemory_policy", policy), slog.String("node", node))
	}
}

// warmKey is the key of openWires' EXISTS calls; nothing writes it.
const warmKey = "quotagate:warm"

// openWires opens every pipelined connection of n before the first
// decision. rueidis dials a node's connections lazily and sends each keyed
// command on one picked at random, so a fresh Store's first decisions
// would otherwise pay a dial on the request path, and a dial's handshake
// waits for its replies whatever the caller's context says (up to the
// dial timeout): on a slow server, a caller that left stayed held. It
// sends 32 keyed EXISTS per connection, from one goroutine per
// connection: each connection is then left unopened with probability
// (1-1/wires)^(32*wires), below 1e-14 for up to 8 connections. A node
// that answers MOVED (a Cluster node asked for a key it does not serve)
// still had its connection opened.
func openWires(ctx context.Context, n rueidis.Client, wires int) {
	if wires < 2 {
		return // the one connection is open: the node just answered
	}
	var wg sync.WaitGroup
	for range wires {
		wg.Go(func() {
			for range 32 {
				if n.Do(ctx, n.B().Exists().Key(warmKey).Build()).NonRedisError() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// wires returns how many pipelined connections c keeps to each node, as
// rueidis derives it from ClientOption.PipelineMultiplex (its
// singleClientMultiplex for standalone and Sentinel clients: up to 4 with
// 0, the default, from GOMAXPROCS; 1<<PipelineMultiplex on a Cluster). The
// options are the Store's own when it dialled c; for a caller's client
// (New) they are unknown and taken as the default.
func (s *Store) wires(c rueidis.Client) int {
	multiplex := 0
	if s.subOpt != nil {
		multiplex = s.subOpt.PipelineMultiplex
	}
	if c.Mode() != rueidis.ClientModeCluster && multiplex == 0 {
		multiplex = min(int(math.Log2(float64(runtime.GOMAXPROCS(0)))), 2)
	}
	if multiplex <= 0 {
		return 1
	}
	return 1 << multiplex
}
