package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// TestBatchedRepliesReachTheirCallers: 3 Stores (two on one client) on one
// server, 256 goroutines, 8 keys of different limits, a quarter of the
// Takes under a deadline of 0 to 2 ms (given up queued, given up sent):
// on every key the admitted Takes' Remaining values are distinct and
// below the key's limit (a reply handed to the wrong caller, or an Op
// decided twice, repeats one or fails decideReply's check), no decision
// errs but by its own context, and the count stored is at least the
// admissions and at most admissions plus the Takes that gave up.
func TestBatchedRepliesReachTheirCallers(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix := testPrefix(t)
		c1, c2 := be.newClient(t), be.newClient(t)
		t.Cleanup(func() { deleteKeys(t, c1, prefix) })
		var stores []*Store
		for _, c := range []rueidis.Client{c1, c1, c2} {
			s, err := New(c, WithoutGuard())
			if err != nil {
				t.Fatal(err)
			}
			stores = append(stores, s)
		}
		const keys, goroutines = 8, 256
		each := 40
		if !be.real {
			each = 10 // miniredis runs a batch of 64 in milliseconds
		}
		ops := make([]limitstore.Op, keys)
		for k := range ops {
			ops[k] = oneQuota(fmt.Sprintf("%s:{k%d}:f", prefix, k),
				limitstore.Quota{Algorithm: limit.FixedWindow, Limit: int64(300 + k), WindowMS: 3_600_000}, 1)
		}
		// Warm up: every pipelined connection of the clients dialed under a
		// long deadline (a connection rueidis dials for a Take of 1 ms
		// deadline is cut before Redis answers, and the reconnect backoff
		// then fails every call for a second: not what this test is about).
		warm := oneQuota(prefix+":{warm}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 1 << 20, WindowMS: 3_600_000}, 1)
		var ww sync.WaitGroup
		for i := range 512 {
			ww.Go(func() {
				if _, err := limittest.Take(ctxT(t), stores[i%len(stores)], &warm); err != nil {
					t.Error(err)
				}
			})
		}
		ww.Wait()
		var mu sync.Mutex
		remaining := make([]map[int64]int, keys)
		gaveUp := make([]int, keys)
		for k := range remaining {
			remaining[k] = map[int64]int{}
		}
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range each {
					k := rng.IntN(keys)
					s := stores[rng.IntN(len(stores))]
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					short := rng.IntN(4) == 0
					if short {
						cancel()
						ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
					}
					res, err := limittest.Take(ctx, s, &ops[k])
					cancel()
					mu.Lock()
					switch {
					case err != nil && short && ctx.Err() != nil:
						gaveUp[k]++
					case err != nil:
						t.Errorf("key %d: %v", k, err)
					case res.Allowed:
						remaining[k][res.Quotas[0].Remaining]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for k := range keys {
			for r, n := range remaining[k] {
				if n != 1 || r < 0 || r >= ops[k].Quotas[0].Limit {
					t.Errorf("key %d: Remaining %d answered %d times (limit %d)", k, r, n, ops[k].Quotas[0].Limit)
				}
			}
			v, err := c1.Do(context.Background(), c1.B().Get().Key(string(ops[k].Quotas[0].Key)).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			count := int(le(v[8:16]))
			if adm := len(remaining[k]); count < adm || count > adm+gaveUp[k] {
				t.Errorf("key %d: count stored %d, %d admitted, %d gave up", k, count, adm, gaveUp[k])
			}
			t.Logf("key %d: %d admitted, %d gave up, count %d", k, len(remaining[k]), gaveUp[k], count)
		}
	})
}

func le(s string) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v
}

// TestBatchedUnderScriptFlushAndClose: 128 goroutines on one Store while
// SCRIPT FLUSH empties the server's script cache again and again (rueidis
// answers NOSCRIPT with EVAL, for the one-Op and the batch script alike),
// then Close in the middle of the load: every Take returns (no hang), with
// a decision before Close and ErrClosed or a decision after it, never
// another error; the count stored is the admissions (no deadline: nothing
// given up); and no goroutine is left (TestMain's goleak).
func TestBatchedUnderScriptFlushAndClose(t *testing.T) {
	prefix, client, s, _ := countingStore(t, standaloneBackend(t))
	op := oneQuota(prefix+":{flush}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 1 << 20, WindowMS: 3_600_000}, 1)
	var admitted, closedErrs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := limittest.Take(context.Background(), s, &op)
				switch {
				case errors.Is(err, ErrClosed):
					closedErrs.Add(1)
					return
				case err != nil:
					t.Errorf("Take: %v", err)
					return
				case res.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	for range 20 {
		time.Sleep(5 * time.Millisecond) // load runs between flushes; the outcome does not depend on timing
		if err := client.Do(context.Background(), client.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(stop)
		t.Fatal("Takes still running 10 s after Close")
	}
	close(stop)
	v, err := client.Do(context.Background(), client.B().Get().Key(string(op.Quotas[0].Key)).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	if count := int64(le(v[8:16])); count != admitted.Load() {
		t.Errorf("count stored %d, %d admitted", count, admitted.Load())
	}
	t.Logf("%d admitted through 20 SCRIPT FLUSH, %d Takes answered ErrClosed", admitted.Load(), closedErrs.Load())
}
