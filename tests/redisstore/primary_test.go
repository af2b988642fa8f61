package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// A failover that repoints an address: the Store reaches Redis A through
// an address (here a forwarder) that is then pointed at B, the new
// primary, while A becomes B's replica and keeps the Store's connections,
// answering every script call READONLY. The Store drops those connections
// on the first READONLY and dials again, so Redis decides again within
// 3 s: in every one of 20 runs.
func TestRepointedFailoverRecovers(t *testing.T) {
	skipNoEnv(t, envServer, "repointed failover (own redis-server processes)")
	readOnlyRuns := 0
	for run := range 20 {
		a, b := redisfault.Start(t), redisfault.Start(t)
		fwd := redisfault.NewProxy(t, a.Addr())
		var log limittest.Log
		s, err := NewFromURL(fwd.URL(), WithLogger(log.Logger()), WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l := limittest.MustNew(s, limit.Policy{Name: "failover", Limit: 1_000_000, FailureMode: limit.FailClosed}, limit.WithKeyPrefix("primary"))
		ctx := context.Background()
		for range 2 {
			if _, err := l.Consume(ctx, "u"); err != nil {
				t.Fatalf("run %d before the failover: %v", run, err)
			}
		}
		fwd.SetTarget(b.Addr())
		replicaOf(t, a, b)
		start := time.Now()
		sawReadOnly := false
		for {
			_, err := l.Consume(ctx, "u")
			if err == nil {
				break
			}
			sawReadOnly = sawReadOnly || strings.Contains(err.Error(), "READONLY")
			if time.Since(start) > 3*time.Second {
				t.Fatalf("run %d: decisions still fail %v after the failover: %v", run, time.Since(start), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// A demoted primary sometimes drops its clients' connections
		// itself; then rueidis dials the new primary without a READONLY.
		if n := log.Count("not a usable primary"); sawReadOnly && n != 1 {
			t.Fatalf("run %d: %d log lines about the demoted primary, want 1: %s", run, n, log.String())
		}
		if sawReadOnly {
			readOnlyRuns++
		}
		s.Close()
	}
	t.Logf("%d of 20 runs met READONLY before Redis decided again", readOnlyRuns)
	if readOnlyRuns == 0 {
		t.Fatal("no run met READONLY: the old primary never kept its connections, the test tests nothing")
	}
}

// replicaOf makes a the replica of b and waits until a answers writes with
// READONLY.
func replicaOf(t *testing.T, a, b *redisfault.Server) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	host, port, _ := strings.Cut(b.Addr(), ":")
	p, err := strconv.ParseInt(port, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Replicaof().Host(host).Port(p).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 500 {
		err := c.Do(ctx, c.B().Set().Key("probe").Value("1").Build()).Error()
		var re *rueidis.RedisError
		if errors.As(err, &re) && strings.HasPrefix(re.Error(), "READONLY") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the old primary never answered READONLY")
}
