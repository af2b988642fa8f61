package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// decisionRecord is one Take of the failover load: when it started and
// ended, for which identity, and what came back.
type decisionRecord struct {
	start, end time.Time
	id         int
	allowed    bool
	window     int64
	err        error
}

// A 3-master Cluster (each master with one replica) loses a master to
// kill -9 under load from 3 Stores (as from 3 processes). The identities
// on the other masters are decided by Redis throughout: no error of any
// kind, in particular no "circuit breaker is open"; the dead master's
// identities follow the failure mode (an error; or the deny cache's
// copy of a denial Redis gave before) until its replica is promoted, and Redis decides them again within 1 s of the promotion.
// Redis never admits more than the limit in a window, and every key left
// has a TTL. The Store reports its breakers to its observer as one. A
// Store that sent nothing to the dead master's slots decides them by Redis
// on its first try after the promotion (its slot map moved them without
// traffic).
func TestClusterMasterKillIsolatesItsSlots(t *testing.T) {
	t.Parallel()
	cl := redisfault.StartCluster(t, 3, 1, time.Second,
		"--cluster-require-full-coverage", "no", "--cluster-replica-validity-factor", "0")
	url := "redis://" + cl.Masters[0].Addr() + "?addr=" + cl.Masters[1].Addr() + "&addr=" + cl.Masters[2].Addr()
	prefix := testPrefix(t)
	const ids, limitPerWindow = 48, 3
	keys := make([]string, ids)
	owner := make([]int, ids) // the index of the master serving the identity's slot at the start
	for i := range keys {
		keys[i] = opKey(prefix, "3p1s", limit.FixedWindow, "id"+strconv.Itoa(i))
		v, err := redisfault.Command(cl.Masters[1].Addr(), time.Second, "CLUSTER", "KEYSLOT", keys[i])
		if err != nil {
			t.Fatal(err)
		}
		slot, _ := strconv.Atoi(v)
		owner[i] = slot * 3 / 16384
	}
	quota := limitstore.Quota{Algorithm: limit.FixedWindow, Limit: limitPerWindow, WindowMS: 1000}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var records []decisionRecord
	rec := &limittest.Recorder{} // the first Store's protection events
	for g := range 3 {
		opts := []Option{WithTimeout(time.Second), WithLogger(slog.New(slog.DiscardHandler))}
		if g == 0 {
			opts = append(opts, WithObserver(rec))
		}
		s, err := NewFromURL(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		for w := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), uint64(w)))
				var mine []decisionRecord
				defer func() { mu.Lock(); records = append(records, mine...); mu.Unlock() }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					id := rng.IntN(ids)
					op := oneQuota(keys[id], quota, 1)
					r := decisionRecord{start: time.Now(), id: id}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err := limittest.Take(ctx, s, &op)
					cancel()
					r.end, r.err, r.allowed, r.window = time.Now(), err, res.Allowed, res.Quotas[0].Window
					mine = append(mine, r)
					time.Sleep(3 * time.Millisecond) // pacing the load, not timing anything
				}
			})
		}
	}

	// A fourth Store decides only for identities on the live masters: the
	// dead master's slots see no traffic from it until the end.
	quiet, err := NewFromURL(url, WithTimeout(time.Second), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(quiet.Close)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if id := i % ids; owner[id] != 0 {
				op := oneQuota(keys[id], quota, 1)
				limittest.Take(context.Background(), quiet, &op)
				time.Sleep(10 * time.Millisecond) // a trickle
			}
		}
	})

	time.Sleep(time.Second) // load on the healthy Cluster
	cl.Masters[0].Kill()
	killed := time.Now()
	replica := cl.Replicas[0][0]
	for !redisfault.IsMaster(replica) {
		if time.Since(killed) > 15*time.Second {
			close(stop)
			wg.Wait()
			t.Fatal("the dead master's replica was not promoted within 15 s")
		}
		time.Sleep(10 * time.Millisecond) // polling the replica's role
	}
	promoted := time.Now()
	time.Sleep(1500 * time.Millisecond) // load after the promotion
	close(stop)
	wg.Wait()

	// The quiet Store's first decisions on the dead master's slots, 1.5 s
	// after the promotion: its slot map has moved them to the new master.
	quietFailed := 0
	for id := range ids {
		if owner[id] != 0 {
			continue
		}
		op := oneQuota(keys[id], quota, 1)
		if _, err := limittest.Take(context.Background(), quiet, &op); err != nil {
			quietFailed++
			t.Errorf("identity %d, no traffic from this Store since before the kill: %v", id, err)
		}
	}
	t.Logf("a Store without traffic on the dead master's slots: %d of its first decisions there failed after the promotion", quietFailed)

	var healthy, healthyErr, healthyOpen, deadDown, deadDownOK, deadDownCached, deadAfter, deadAfterErr int
	var firstBack time.Time
	admitted := map[[2]int64]int{}
	for _, r := range records {
		if r.err == nil && r.allowed {
			admitted[[2]int64{int64(r.id), r.window}]++
		}
		if owner[r.id] != 0 {
			healthy++
			if r.err != nil {
				healthyErr++
				if errors.Is(r.err, limitstore.ErrCircuitOpen) {
					healthyOpen++
				}
				if healthyErr <= 3 {
					t.Errorf("identity %d on a live master: %v (%v after the kill)", r.id, r.err, r.start.Sub(killed))
				}
			}
			continue
		}
		switch {
		case r.start.After(killed) && r.end.Before(promoted.Add(-50*time.Millisecond)):
			deadDown++
			switch {
			case r.err == nil && r.allowed:
				deadDownOK++
			case r.err == nil:
				deadDownCached++ // the deny cache: a denial Redis gave until a later instant
			}
		case !r.start.Before(promoted.Add(time.Second)):
			deadAfter++
			if r.err != nil {
				deadAfterErr++
			}
		}
		if r.err == nil && r.start.After(promoted) && (firstBack.IsZero() || r.end.Before(firstBack)) {
			firstBack = r.end
		}
	}
	t.Logf("%d decisions; live masters' identities: %d, %d errors (%d breaker-open); dead master's: %d between kill and promotion (%d admitted by Redis, %d denials from the deny cache), %d from 1 s after it (%d failed); promotion %v after the kill, Redis decided the dead master's identities again %v after it",
		len(records), healthy, healthyErr, healthyOpen, deadDown, deadDownOK, deadDownCached, deadAfter, deadAfterErr, promoted.Sub(killed).Round(time.Millisecond), firstBack.Sub(promoted).Round(time.Millisecond))
	if healthyErr != 0 {
		t.Errorf("%d of %d decisions for identities on live masters were not decided by Redis (%d breaker-open), want 0", healthyErr, healthy, healthyOpen)
	}
	if deadDown == 0 || deadDownOK != 0 {
		t.Errorf("between the kill and the promotion, %d of %d decisions for the dead master's identities were admissions by Redis, want 0 of some", deadDownOK, deadDown)
	}
	if firstBack.IsZero() || firstBack.Sub(promoted) > time.Second || deadAfter == 0 || deadAfterErr != 0 {
		t.Errorf("after the promotion: first decided by Redis %v after it, %d of %d decisions from 1 s after it failed; want within 1 s and 0 of some",
			firstBack.Sub(promoted), deadAfterErr, deadAfter)
	}
	// The Store reports its breaker as one: open while any master's is,
	// closed once none is.
	if b := rec.Breaker(); len(b) < 2 || !b[0] || b[len(b)-1] {
		t.Errorf("breaker transitions %v, want opened first and closed last", b)
	}
	for k, n := range admitted {
		if n > limitPerWindow {
			t.Errorf("identity %d, window %d: Redis admitted %d, limit %d", k[0], k[1], n, limitPerWindow)
		}
	}
	for _, m := range []*redisfault.Server{cl.Masters[1], cl.Masters[2], replica} {
		for _, k := range scanTTLs(t, m.Addr(), prefix) {
			t.Errorf("key %s on %s has no TTL", k, m.Addr())
		}
	}
}

// scanTTLs returns the keys under prefix on the node at addr that have no
// TTL (PTTL -1).
func scanTTLs(t *testing.T, addr, prefix string) []string {
	t.Helper()
	var bad []string
	for i := range 48 {
		k := opKey(prefix, "3p1s", limit.FixedWindow, "id"+strconv.Itoa(i))
		v, err := redisfault.Command(addr, time.Second, "PTTL", k)
		if err != nil {
			if len(err.Error()) > 5 && err.Error()[:5] == "MOVED" {
				continue // another node's key
			}
			t.Fatalf("PTTL %s on %s: %v", k, addr, err)
		}
		if v == "-1" {
			bad = append(bad, fmt.Sprint(k))
		}
	}
	return bad
}
