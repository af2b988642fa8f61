package redisstore_test

import (
	"context"
	"errors"
	"github.com/quotagate/quotagate/engine/limittest"
	"testing"
	"time"

	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// staleDeadline is a context whose deadline has passed but which is not
// done yet (the engine's store context between its nominal deadline and the
// check that closes it): rueidis puts the deadline on the connection, so a
// handshake under it is cut before anything is written.
type staleDeadline struct{ context.Context }

func (staleDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestRegressionTinyDeadlinesDoNotCloseTheGate: a fresh client's first
// Takes carry 1 ms deadlines, so the connection rueidis opens lazily for
// them (its second pipelined connection, picked at random per call) is
// dialed under a caller's tiny deadline: the dial or the handshake is cut
// short by the CALLER's context (already done; deadline passed but not yet
// done; 1 ms). That says nothing about the server: the dial gate must not
// refuse the address afterwards. Every Take with a normal deadline right
// after must be decided by Redis (before the fix, about half of them, those
// on the connection whose handshake had been cut, failed with
// ErrReconnectBackoff for 1 s).
func TestRegressionTinyDeadlinesDoNotCloseTheGate(t *testing.T) {
	for _, be := range []struct {
		name string
		url  func(t *testing.T) string
		opt  func(*rueidis.ClientOption)
	}{
		// ForceSingleClient: miniredis answers CLUSTER SLOTS (see miniBackendOf).
		{"miniredis", func(t *testing.T) string { return "redis://" + miniBackendServer(t).Addr() },
			func(o *rueidis.ClientOption) { o.ForceSingleClient = true }},
		{"standalone", func(t *testing.T) string { return skipNoEnv(t, envURL, "real standalone Redis") },
			func(*rueidis.ClientOption) {}},
	} {
		t.Run(be.name, func(t *testing.T) {
			url := be.url(t)
			for round := range 5 { // a fresh client each round: its first Takes are the case
				// The store's timeout is the test's 2 s, not the default
				// 100 ms: on a loaded machine under -race a round trip can
				// take longer than that, and this test is about the gate's
				// refusals (at once), not about latency.
				s, err := NewFromURL(url, WithClientOption(be.opt), WithTimeout(2*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				prefix := testPrefix(t)
				ops := ttlOps(prefix, "tiny")
				// One at a time: concurrent callers would share one lazy dial,
				// and rueidis hands every waiter the dialing caller's error
				// (see the report of this fix); the gate is what is tested.
				for i := range 24 {
					var ctx context.Context
					cancel := func() {}
					switch i % 3 {
					case 0:
						ctx, cancel = context.WithTimeout(context.Background(), -time.Millisecond)
					case 1:
						ctx = staleDeadline{context.Background()}
					case 2:
						ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
					}
					op := ops[i%len(ops)]
					limittest.Take(ctx, s, &op) // may fail: its own deadline
					cancel()
				}
				for i := range 16 {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					op := ops[i%len(ops)]
					_, err := limittest.Take(ctx, s, &op)
					cancel()
					if err != nil {
						t.Fatalf("round %d: Take %d with a 2 s deadline after Takes with 1 ms ones: %v (refused: %v)",
							round, i, err, errors.Is(err, ErrReconnectBackoff))
					}
				}
				deleteKeys(t, s.Client(), prefix)
				s.Close()
			}
		})
	}
}
