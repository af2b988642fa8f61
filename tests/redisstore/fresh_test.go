package redisstore_test

import (
	"context"
	"github.com/quotagate/quotagate/engine/limittest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redistest"
	"github.com/redis/rueidis"
)

// A Store built fresh, on a Redis that answers, decides its very first
// request by Redis under the default store timeout (100 ms): its
// connections are open and its scripts loaded before it is returned, on
// every node. 50 fresh Stores of each kind: standalone, Sentinel and
// Cluster (each Store's first identity lands on any of the masters).
func TestFreshStoreDecidesFirstRequestByRedis(t *testing.T) {
	urls := map[string]string{}
	if u := os.Getenv(envURL); u != "" {
		urls["standalone"] = u
	}
	if s, m := os.Getenv("QUOTAGATE_REDIS_SENTINEL"), os.Getenv("QUOTAGATE_REDIS_SENTINEL_MASTER"); s != "" && m != "" {
		hosts := strings.Split(s, ",")
		urls["sentinel"] = "redis://" + hosts[0] + "?master_set=" + m
		for _, h := range hosts[1:] {
			urls["sentinel"] += "&addr=" + h
		}
	}
	if c := os.Getenv(envCluster); c != "" {
		hosts := strings.Split(c, ",")
		urls["cluster"] = "redis://" + hosts[0] + "?addr=" + strings.Join(hosts[1:], "&addr=")
	}
	for _, kind := range []string{"standalone", "sentinel", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			url, ok := urls[kind]
			if !ok {
				t.Skipf("!!! SKIPPED: no %s Redis configured, so this run did NOT happen (run `make test` with redis-server on PATH)", kind)
			}
			if kind == "sentinel" {
				redistest.LockSentinel(t) // tests/sentinel kills the primary
			}
			prefix := testPrefix(t)
			failed, slowest := 0, time.Duration(0)
			for i := range 50 {
				s, err := NewFromURL(url)
				if err != nil {
					t.Fatalf("store %d: %v", i, err)
				}
				op := oneQuota(opKey(prefix, "5p60", limit.SlidingWindow, "fresh"+strconv.Itoa(i)),
					limitstore.Quota{Algorithm: limit.SlidingWindow, Limit: 5, WindowMS: 60_000}, 1)
				start := time.Now()
				res, err := limittest.Take(context.Background(), s, &op)
				slowest = max(slowest, time.Since(start))
				if err != nil || !res.Allowed {
					failed++
					t.Errorf("store %d: first decision %+v, %v; want admitted by Redis", i, res, err)
				}
				if i < 49 {
					s.Close()
					continue
				}
				deleteKeys(t, s.Client(), prefix)
				s.Close()
			}
			t.Logf("%d of 50 fresh stores decided their first request by Redis; the slowest first decision took %v", 50-failed, slowest)
		})
	}
}

// A Store opens every pipelined connection to every node before it is
// returned: rueidis would dial them lazily, on the first decision sent on
// each, and a dial's handshake holds its caller whatever the caller's
// context says. Counted by CLIENT LIST, by the Store's client name, with
// 2, 4 and 8 connections per node (PipelineMultiplex 1-3), standalone and
// Cluster. Without a guard, so that no subscription adds a connection.
func TestFreshStoreOpensEveryConnection(t *testing.T) {
	kinds := map[string][]string{}
	if u := os.Getenv(envURL); u != "" {
		opt, err := ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		kinds["standalone"] = opt.InitAddress
	}
	if c := os.Getenv(envCluster); c != "" {
		kinds["cluster"] = strings.Split(c, ",")
	}
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			addrs, ok := kinds[kind]
			if !ok {
				t.Skipf("!!! SKIPPED: no %s Redis configured, so this run did NOT happen (run `make test` with redis-server on PATH)", kind)
			}
			for multiplex := 1; multiplex <= 3; multiplex++ {
				name := testPrefix(t) + "-m" + strconv.Itoa(multiplex)
				opt := rueidis.ClientOption{InitAddress: addrs, DisableCache: true, AlwaysPipelining: true,
					ClientName: name, PipelineMultiplex: multiplex}
				s, err := Dial(opt, WithoutGuard())
				if err != nil {
					t.Fatal(err)
				}
				for a, ids := range namedConns(t, addrs, name) {
					if len(ids) != 1<<multiplex {
						t.Errorf("PipelineMultiplex %d: %d connections open to %s, want %d", multiplex, len(ids), a, 1<<multiplex)
					}
				}
				s.Close()
			}
		})
	}
}
