// Package hung measures how the Redis store's client behaves against a
// frozen redis-server (SIGSTOP) under load: how many new connections it
// opens per second while the server accepts connections but never
// answers, and that it is answered again once the server resumes.
package hung

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	rate      = 200                    // requests per second offered during the test
	freeze    = 5 * time.Second        // how long the server stays SIGSTOPped
	storeWait = 100 * time.Millisecond // the Redis store's default timeout (redisstore.WithTimeout)
	// maxConnsPerSecond is the target: new connections to the hung
	// server per second per process.
	maxConnsPerSecond = 1
	// resumeMargin is added to ReconnectInterval for scheduling on a
	// loaded machine (-race, shared cores).
	resumeMargin = time.Second
)

// TestFrozenServerConnections freezes the server for 5 s under 200
// requests per second and counts, at a proxy in front of it, the
// connections the client opens meanwhile; then checks that Redis answers
// again within the store's ReconnectInterval (plus a margin for a loaded
// machine) of SIGCONT. Two clients: a Limiter on a Store from NewFromURL
// (what an application gets), and a bare rueidis client with ParseURL's
// options (the client options alone, whatever the engine does on top).
func TestFrozenServerConnections(t *testing.T) {
	t.Run("limiter", func(t *testing.T) {
		frozenRun(t, func(t *testing.T, url string) func(context.Context) error {
			store, err := redisstore.NewFromURL(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			lim, err := limit.New(store, limit.Policy{Name: "hung", Limit: 1 << 30, Window: time.Minute},
				limit.WithKeyPrefix(fmt.Sprintf("hung%d", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			var n atomic.Int64
			return func(ctx context.Context) error {
				_, err := lim.Consume(ctx, fmt.Sprintf("client-%d", n.Add(1)%64))
				return err
			}
		})
	})
	t.Run("client", func(t *testing.T) {
		frozenRun(t, func(t *testing.T, url string) func(context.Context) error {
			opt, err := redisstore.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			c, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			var n atomic.Int64
			return func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, storeWait)
				defer cancel()
				k := fmt.Sprintf("hung:{%d}", n.Add(1)%64)
				return c.Do(ctx, c.B().Set().Key(k).Value("1").Px(time.Minute).Build()).Error()
			}
		})
	})
}

// frozenRun drives the requests newDo builds against a server behind a
// proxy, freezes the server, and checks the connections and the recovery.
func frozenRun(t *testing.T, newDo func(t *testing.T, url string) func(context.Context) error) {
	srv := redisfault.Start(t)
	proxy := redisfault.NewProxy(t, srv.Addr())
	load := redisfault.StartLoad(t, rate, newDo(t, proxy.URL()))
	load.WaitAnswered(rate, 20*time.Second) // warm: every connection the load needs is open

	srvBefore := srv.ConnectionsReceived()
	before := proxy.Accepted()
	failedBefore := load.Failed()
	srv.Freeze()
	t0 := time.Now()
	time.Sleep(freeze) // the fault lasts this long: real time is what is measured
	during := proxy.Accepted() - before
	el := time.Since(t0)
	srv.Thaw()
	thawed := load.Mark()
	resumed := load.WaitFirstAnswer(20 * time.Second).Sub(thawed)
	load.WaitAnswered(50, 20*time.Second)
	srvConns := srv.ConnectionsReceived() - srvBefore - 1 // minus this INFO's own connection
	perSec := float64(during) / el.Seconds()
	t.Logf("frozen %v at %d req/s: %d new connections at the proxy (%.2f/s); %d failed over; "+
		"first answer from Redis %v after SIGCONT; the server accepted %d connections from the freeze until 50 more answers",
		el.Round(time.Millisecond), rate, during, perSec, load.Failed()-failedBefore,
		resumed.Round(time.Millisecond), srvConns)
	if max := int64(maxConnsPerSecond * el.Seconds()); during > max {
		t.Errorf("%d new connections to a server frozen for %v (%.2f/s), want at most %d (%d/s)", during, el, perSec, max, maxConnsPerSecond)
	}
	if bound := redisstore.ReconnectInterval + resumeMargin; resumed > bound {
		t.Errorf("Redis answered again %v after SIGCONT, want within %v (ReconnectInterval + %v)", resumed, bound, resumeMargin)
	}
}
