package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// Group commit (issue 13): concurrent Takes share one EVALSHA of the batch
// script. These tests drive the batching deterministically through the
// public API: gatedClient holds every EVALSHA until the test lets it go, so
// the Store's calls stay out and later Takes queue; watchCtx tells when a
// Take waits in the queue (it asks its context's Done only then, after it
// was queued, and only a gated call asks it first), so the test knows the
// queue's order.

// gatedClient is a rueidis.Client whose EVALSHA calls, while gated, report
// themselves on arrived (with their Op count: opsOf) and wait for a permit
// (or their context).
type gatedClient struct {
	rueidis.Client
	gated   atomic.Bool
	arrived chan int
	permits chan struct{}
	mu      sync.Mutex
	calls   []int // the Op counts of the EVALSHA calls, gated or not
}

func newGated(c rueidis.Client) *gatedClient {
	return &gatedClient{Client: c, arrived: make(chan int), permits: make(chan struct{}, 1000)}
}

func (g *gatedClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) > 3 && strings.EqualFold(cs[0], "EVALSHA") {
		nk, _ := strconv.Atoi(cs[2])
		ops := opsOf(cs[3+nk:])
		g.mu.Lock()
		g.calls = append(g.calls, ops)
		g.mu.Unlock()
		if g.gated.Load() {
			g.arrived <- ops
			select {
			case <-g.permits:
			case <-ctx.Done():
				return rueidis.NewErrorResult(ctx.Err())
			}
		}
	}
	return g.Client.Do(ctx, cmd)
}

// opsOf is the number of Ops a store's script call with arguments args
// decides: 1 for a plain call (one argument), else the Ops of the batch
// (the store's wire format: ARGV[1] holds per Op n, the index of its
// argument, n key indexes and 4 bytes of phase; the arguments follow); 0
// for neither.
func opsOf(args []string) int {
	if len(args) == 1 {
		return 1
	}
	if len(args) == 0 {
		return 0
	}
	h, ops := args[0], 0
	for len(h) >= 2 {
		n := int(h[0]) &^ 0x80 // the head's flag: the key is read again later
		if n < 1 || n > limitstore.MaxQuotas || int(h[1]) < 2 || int(h[1]) > len(args) || len(h) < 6+n {
			return 0
		}
		h, ops = h[6+n:], ops+1
	}
	if h != "" {
		return 0
	}
	return ops
}

// batchCalls returns the Op counts of the store's script calls.
func (g *gatedClient) batchCalls() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// watchCtx closes asked the first time Done is called.
type watchCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func newWatchCtx(parent context.Context) *watchCtx {
	return &watchCtx{Context: parent, asked: make(chan struct{})}
}

func (c *watchCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// outcome is one Take's answer.
type outcome struct {
	res limitstore.Result
	err error
}

// gatedRun starts Takes on s through g one at a time: first fillers (Ops
// on keys of their own) until one of them queues, so every call slot is
// held by a gated call; then each of ops, waiting until it is queued. It
// returns the fillers' and the ops' outcome channels, in the ops' order.
// The caller then lets the calls go (release).
type gatedRun struct {
	t       *testing.T
	s       *Store
	g       *gatedClient
	held    int // gated calls waiting for a permit
	fillers []chan outcome
}

func startGated(t *testing.T, s *Store, g *gatedClient, fillerPrefix string) *gatedRun {
	t.Helper()
	return startGatedWith(t, s, g, func(i int) limitstore.Op {
		return oneQuota(fmt.Sprintf("%s:{fill%d}:f", fillerPrefix, i),
			limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	})
}

// startGatedWith is startGated with the fillers' Ops made by filler (the
// i-th filler's; each on keys of its own): the last one made is the one
// that queued, the first Op of the flight.
func startGatedWith(t *testing.T, s *Store, g *gatedClient, filler func(i int) limitstore.Op) *gatedRun {
	t.Helper()
	r := &gatedRun{t: t, s: s, g: g}
	g.gated.Store(true)
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 concurrent Takes and none queued: the Store does not batch")
		}
		op := filler(i)
		ch, queued := r.start(context.Background(), &op)
		r.fillers = append(r.fillers, ch)
		if queued {
			return r
		}
	}
}

// start runs s.Take(ctx, op) in a goroutine and waits until it either
// reaches the client (a plain call, held by the gate) or waits in the
// queue; queued reports which.
func (r *gatedRun) start(ctx context.Context, op *limitstore.Op) (ch chan outcome, queued bool) {
	r.t.Helper()
	wc := newWatchCtx(ctx)
	ch = make(chan outcome, 1)
	go func() {
		res, err := r.s.Take(wc, op)
		ch <- outcome{res, err}
	}()
	select {
	case <-r.g.arrived:
		r.held++
		return ch, false
	case <-wc.asked:
		return ch, true
	case <-time.After(10 * time.Second):
		r.t.Fatal("a Take neither reached Redis nor queued within 10 s")
	}
	return nil, false
}

// release lets the held calls and every later call go.
func (r *gatedRun) release() {
	r.g.gated.Store(false)
	for range r.held {
		r.g.permits <- struct{}{}
	}
	r.held = 0
	// A flight that arrived gated before the gate opened.
	for {
		select {
		case <-r.g.arrived:
			r.g.permits <- struct{}{}
		default:
			return
		}
	}
}

// releaseAll lets every call go and waits for the fillers' decisions.
func (r *gatedRun) releaseAll() {
	r.t.Helper()
	r.release()
	for _, ch := range r.fillers {
		if o := r.wait(ch); o.err != nil {
			r.t.Fatalf("filler: %v", o.err)
		}
	}
}

// neverSent fails t unless op's (first) key does not exist: the Take that
// gave up was never sent.
func neverSent(t *testing.T, client rueidis.Client, op *limitstore.Op) {
	t.Helper()
	if n, err := client.Do(context.Background(), client.B().Exists().Key(string(op.Quotas[0].Key)).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("EXISTS of the key of the Take that gave up: %d, %v; want 0 (never sent)", n, err)
	}
}

// wait returns the outcome on ch (10 s at most).
func (r *gatedRun) wait(ch chan outcome) outcome {
	r.t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		r.t.Fatal("a Take did not return within 10 s")
	}
	return outcome{}
}

// batchOps are Ops of every kind, under prefix: the same key several times
// (it runs out), an Op of two quotas and one of three, refunds, costs, a
// key holding a hash (WRONGTYPE) in the middle and as the second key of an
// Op of two quotas at the end, every algorithm. now is
// the caller's clock they are decided at (the refunds' windows follow it).
func batchOps(prefix string, now int64) []limitstore.Op {
	qs := map[limit.Algorithm]limitstore.Quota{
		limit.SlidingWindow: {Algorithm: limit.SlidingWindow, Limit: 3, WindowMS: 60_000, PhaseMS: 1234},
		limit.FixedWindow:   {Algorithm: limit.FixedWindow, Limit: 3, WindowMS: 60_000, PhaseMS: 4321},
		limit.TokenBucket:   {Algorithm: limit.TokenBucket, Limit: 3, Burst: 3, WindowMS: 60_000},
	}
	var ops []limitstore.Op
	one := func(alg limit.Algorithm, id string, cost int64) {
		ops = append(ops, oneQuota(opKey(prefix, "b", alg, id), qs[alg], cost))
	}
	for _, alg := range algorithms {
		for range 4 { // the fourth is denied
			one(alg, "same", 1)
		}
		one(alg, "cost", 2)
		one(alg, "cost", 2) // denied: 1 left
	}
	// A hash under a one-quota key (GET: WRONGTYPE for that Op alone), in
	// the middle of the flight.
	ops = append(ops, oneQuota(prefix+":{wrong}:h", qs[limit.FixedWindow], 1))
	for _, alg := range algorithms {
		one(alg, "after-wrong", 1)
	}
	// Several quotas sharing a tag, twice (the second sees the first's
	// writes), then refunds of a charge of each algorithm.
	multi := func(n int) limitstore.Op {
		op := limitstore.Op{Cost: 1, N: n}
		for j := range n {
			q := qs[algorithms[j%3]]
			q.Limit, q.Burst = int64(2+j), int64(2+j)
			if q.Algorithm != limit.TokenBucket {
				q.Burst = 0
			}
			q.Key = []byte(taggedKey(prefix, "{multi}", fmt.Sprint("m", j), q.Algorithm, "x"))
			op.Quotas[j] = q
		}
		return op
	}
	ops = append(ops, multi(2), multi(3), multi(3), multi(3))
	for _, alg := range algorithms {
		op := oneQuota(opKey(prefix, "b", alg, "same"), qs[alg], 1)
		op.Refund = true
		q := &op.Quotas[0]
		if alg == limit.TokenBucket {
			q.Window = now + 20_000*3 // the TAT of the third charge, rounded up
		} else {
			q.Window = (now - q.PhaseMS) / q.WindowMS
		}
		ops = append(ops, op)
		one(alg, "same", 1) // after the refund: admitted again
	}
	refund := multi(3)
	refund.Refund = true
	for j := range refund.N {
		q := &refund.Quotas[j]
		q.Window = (now - q.PhaseMS) / q.WindowMS
		if q.Algorithm == limit.TokenBucket {
			q.Window = now + q.WindowMS/q.Limit
		}
	}
	ops = append(ops, refund, multi(3))
	// Two quotas, the second's key holding a hash: MGET reads it as no
	// value; the Op must fail WRONGTYPE, not overwrite it.
	wrong := multi(2)
	wrong.Quotas[1].Key = []byte(prefix + ":{wrong}:h")
	wrong.Quotas[0].Key = []byte(prefix + ":{wrong}:m")
	return append(ops, wrong)
}

// TestBatchDecidesAsOneByOne: a flight of Ops of every kind (batchOps) gives
// each Op exactly the Result (or the error) the same Ops sent one by one
// give on a second, identical set of keys, and leaves the same values
// stored; the WRONGTYPE Ops fail alone. On miniredis (no struct library:
// the plain-Lua codec) and a real server, on a caller's clock (identical
// instants) and on the server's TIME (one TIME per flight: compared on the
// fields that do not depend on the instant).
func TestBatchDecidesAsOneByOne(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		for _, callerClock := range []bool{true, false} {
			t.Run(fmt.Sprintf("caller-clock=%v", callerClock), func(t *testing.T) {
				testBatchDecidesAsOneByOne(t, be, callerClock)
			})
		}
	})
}

// forOneServer runs f on the backends that batch: miniredis and the
// standalone server (a Cluster never batches).
func forOneServer(t *testing.T, f func(t *testing.T, be *backend)) {
	t.Run("miniredis", func(t *testing.T) { f(t, miniBackend(t)) })
	t.Run("standalone", func(t *testing.T) { f(t, standaloneBackend(t)) })
}

func testBatchDecidesAsOneByOne(t *testing.T, be *backend, callerClock bool) {
	prefix := testPrefix(t)
	client := be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	now := time.Now().UnixMilli()
	var opts []Option
	if callerClock {
		opts = append(opts, WithClock(func() time.Time { return time.UnixMilli(now) }))
	}
	g := newGated(client)
	batched, err := New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	pa, pb := prefix+":a", prefix+":b"
	for _, p := range []string{pa, pb} {
		if err := client.Do(ctx, client.B().Hset().Key(p+":{wrong}:h").FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// Load the scripts before gating (the first EVALSHA of each answers
	// NOSCRIPT and is followed by an EVAL).
	warm := oneQuota(prefix+":{warm}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	if _, err := alone.Take(ctx, &warm); err != nil {
		t.Fatal(err)
	}
	opsA, opsB := batchOps(pa, now), batchOps(pb, now)

	r := startGated(t, batched, g, prefix+":fill")
	chs := make([]chan outcome, len(opsA))
	for i := range opsA {
		var queued bool
		// No deadline, so no flush timer: the Ops wait for a call to return.
		if chs[i], queued = r.start(context.Background(), &opsA[i]); !queued {
			t.Fatalf("Op %d reached Redis while the calls were held; want it queued", i)
		}
	}
	r.release()
	for _, ch := range r.fillers {
		if o := r.wait(ch); o.err != nil {
			t.Fatalf("filler: %v", o.err)
		}
	}
	got := make([]outcome, len(opsA))
	for i, ch := range chs {
		got[i] = r.wait(ch)
	}
	// The Ops went in one flight, with the filler that queued before them.
	calls := g.batchCalls()
	if m := calls[len(calls)-1]; m != len(opsA)+1 {
		t.Fatalf("script calls by Op count %v: want the last one of %d Ops (the queued filler and every Op)", calls, len(opsA)+1)
	}

	var wrongs, denied, refunds int
	for i := range opsB {
		res, err := alone.Take(ctx, &opsB[i])
		a := got[i]
		if (err == nil) != (a.err == nil) {
			t.Fatalf("Op %d: batched error %v, one by one %v", i, a.err, err)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(a.err.Error(), "WRONGTYPE") {
				t.Fatalf("Op %d: errors %v (batched) and %v (one by one), want WRONGTYPE", i, a.err, err)
			}
			wrongs++
			continue
		}
		if !res.Allowed {
			denied++
		}
		if opsB[i].Refund {
			refunds++
		}
		if !callerClock { // another instant: compare what does not depend on it
			res, a.res = instantFree(res), instantFree(a.res)
		}
		if !reflect.DeepEqual(res, a.res) {
			t.Errorf("Op %d (%s, refund %v): batched %+v, one by one %+v", i, opsA[i].Quotas[0].Key, opsA[i].Refund, a.res, res)
		}
	}
	if wrongs != 2 || denied < 6 || refunds != 4 {
		t.Errorf("%d WRONGTYPE, %d denied, %d refunds: want 2, at least 6, 4", wrongs, denied, refunds)
	}
	// The same values stored.
	for _, k := range scanKeys(t, client, pa) {
		kb := pb + strings.TrimPrefix(k, pa)
		va, ea := client.Do(ctx, client.B().Get().Key(k).Build()).ToString()
		vb, eb := client.Do(ctx, client.B().Get().Key(kb).Build()).ToString()
		if strings.HasSuffix(k, ":h") {
			continue
		}
		if ea != nil || eb != nil || (callerClock && va != vb) || len(va) != len(vb) {
			t.Errorf("key %s: batched %x (%v), one by one %x (%v)", strings.TrimPrefix(k, pa), va, ea, vb, eb)
		}
	}
	// The hashes are untouched, and the Op of two quotas that failed on one
	// wrote neither (TestRegressionSeveralQuotasOnAKeyOfAnotherType).
	for _, p := range []string{pa, pb} {
		if typ, err := client.Do(ctx, client.B().Type().Key(p+":{wrong}:h").Build()).ToString(); err != nil || typ != "hash" {
			t.Errorf("%s:{wrong}:h is a %q (%v) after the flight, want the hash", p, typ, err)
		}
		if n, err := client.Do(ctx, client.B().Exists().Key(p+":{wrong}:m").Build()).AsInt64(); err != nil || n != 0 {
			t.Errorf("%s:{wrong}:m exists (%d, %v): the failed Op wrote its other quota", p, n, err)
		}
	}
	t.Logf("%d Ops in one flight: %d denied, %d refunds, %d WRONGTYPE, each as one by one", len(opsA), denied, refunds, wrongs)
}

// instantFree is r without the fields that depend on the instant of the
// decision (on the server's clock two runs decide at different instants).
func instantFree(r limitstore.Result) limitstore.Result {
	r.NowMS = 0
	for i := range r.Quotas {
		q := &r.Quotas[i]
		q.RetryAfterMS, q.ResetAfterMS, q.TTLMS, q.Window = 0, 0, 0, 0
	}
	return r
}

// countingStore is a Store on a gatedClient of be (not gated: it counts
// the script calls); the test's keys are under prefix, deleted at the end.
func countingStore(t *testing.T, be *backend) (prefix string, client rueidis.Client, s *Store, g *gatedClient) {
	t.Helper()
	prefix = testPrefix(t)
	client = be.newClient(t)
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	g = newGated(client)
	s, err := New(g, WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return prefix, client, s, g
}

// gatedStore is countingStore with the Store's calls held by fillers
// (startGated).
func gatedStore(t *testing.T, be *backend) (prefix string, client rueidis.Client, s *Store, g *gatedClient, r *gatedRun) {
	t.Helper()
	prefix, client, s, g = countingStore(t, be)
	return prefix, client, s, g, startGated(t, s, g, prefix+":fill")
}

// TestQueuedCallerGivesUpUncharged: a Take whose context ends while it is
// queued returns the context's error at once and is never sent: its key is
// never charged.
func TestQueuedCallerGivesUpUncharged(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix, client, s, _, r := gatedStore(t, be)
		op := oneQuota(prefix+":{gone}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
		ctx, cancel := context.WithCancel(context.Background())
		ch, queued := r.start(ctx, &op)
		if !queued {
			t.Fatal("the Take reached Redis while the calls were held; want it queued")
		}
		cancel()
		if o := r.wait(ch); !errors.Is(o.err, context.Canceled) {
			t.Fatalf("queued Take after cancel: %+v, want context.Canceled", o)
		}
		r.releaseAll()
		neverSent(t, client, &op)
		res, err := s.Take(ctxT(t), &op)
		if err != nil || res.Quotas[0].Remaining != 9 {
			t.Fatalf("next Take: %+v, %v; want Remaining 9 (the one that gave up charged nothing)", res, err)
		}
	})
}

// TestCancelledMemberDoesNotFailItsFlight: three Takes in one flight; the
// second's context is cancelled while the flight is out. It returns at
// once with context.Canceled; the other two get their decisions; the
// flight reached Redis, so the second was charged too (as a timed-out call
// may be).
func TestCancelledMemberDoesNotFailItsFlight(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix, _, s, g, r := gatedStore(t, be)
		ops := make([]limitstore.Op, 3)
		chs := make([]chan outcome, 3)
		ctx, cancel := context.WithCancel(context.Background())
		for i := range ops {
			ops[i] = oneQuota(fmt.Sprintf("%s:{m%d}:f", prefix, i), limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
			c := context.Background()
			if i == 1 {
				c = ctx
			}
			if chs[i], _ = r.start(c, &ops[i]); chs[i] == nil {
				t.Fatal("no Take")
			}
		}
		// Let the held plain calls go, but hold the flight.
		for range r.held {
			g.permits <- struct{}{}
		}
		r.held = 0
		select {
		case n := <-g.arrived:
			if n != 4 { // the queued filler and the three Ops
				t.Fatalf("a call of %d Ops arrived; want the flight of 4 Ops", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no flight within 10 s")
		}
		cancel()
		if o := r.wait(chs[1]); !errors.Is(o.err, context.Canceled) {
			t.Fatalf("cancelled member: %+v, want context.Canceled", o)
		}
		r.release()
		g.permits <- struct{}{} // the held flight
		for _, i := range []int{0, 2} {
			if o := r.wait(chs[i]); o.err != nil || !o.res.Allowed || o.res.Quotas[0].Remaining != 9 {
				t.Fatalf("member %d: %+v, %v; want admitted, Remaining 9", i, o.res, o.err)
			}
		}
		for _, ch := range r.fillers {
			if o := r.wait(ch); o.err != nil {
				t.Fatalf("filler: %v", o.err)
			}
		}
		res, err := s.Take(ctxT(t), &ops[1])
		if err != nil || res.Quotas[0].Remaining != 8 {
			t.Fatalf("the cancelled member's key: %+v, %v; want Remaining 8 (its flight reached Redis)", res, err)
		}
	})
}

// TestBatchedExactCount: 200 goroutines on one Store and one key of limit
// 100, every algorithm: exactly 100 admitted, and on a real server fewer
// EVALSHA calls than decisions (they were batched); on a Cluster, where
// nothing is batched, exactly one per decision.
func TestBatchedExactCount(t *testing.T) {
	const goroutines, quota = 200, 100
	forEachBackend(t, func(t *testing.T, be *backend) {
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				prefix, _, s, g := countingStore(t, be)
				l := limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: quota, Window: 24 * time.Hour, FailureMode: limit.FailClosed},
					limit.WithKeyPrefix(prefix))
				ctx := ctxT(t)
				for rep := range 5 {
					var allowed atomic.Int64
					start := make(chan struct{})
					var wg sync.WaitGroup
					for range goroutines {
						wg.Go(func() {
							<-start
							d, err := l.Consume(ctx, fmt.Sprint("rep", rep))
							if err != nil {
								t.Error(err)
							}
							if d.Allowed {
								allowed.Add(1)
							}
						})
					}
					close(start)
					wg.Wait()
					if got := allowed.Load(); got != quota {
						t.Errorf("rep %d: %d of %d admitted, want exactly %d", rep, got, goroutines, quota)
					}
				}
				calls := g.batchCalls()
				decided := 0
				for _, n := range calls {
					decided += n
				}
				t.Logf("%d decisions by Redis in %d script calls", decided, len(calls))
				// The deny cache answers some denials without a call.
				if be.name == "cluster" && len(calls) != decided {
					t.Errorf("Cluster: %d script calls for %d decisions; want one each (no batching)", len(calls), decided)
				}
				if be.name != "cluster" && len(calls) >= decided {
					t.Errorf("%s: %d script calls for %d decisions; want fewer (batched)", be.name, len(calls), decided)
				}
			})
		}
	})
}

// TestBatchedCheckAllocs is the allocation guard of the batched path: 64
// goroutines deciding through Limiter.Check on a real server (so calls are
// shared) allocate at most 2 times per decision in the whole process
// (issue 13; measured ~0.1-0.3: a call's reply is shared by its decisions,
// and a runner starts once per load burst). Skipped under -race, which
// changes allocation counts and drops pooled waiters at random.
func TestBatchedCheckAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("!!! SKIPPED under -race: sync.Pool drops items at random and the race detector changes allocation counts; run `go test -run TestBatchedCheckAllocs` without -race")
	}
	prefix, _, s, g := countingStore(t, standaloneBackend(t))
	for _, alg := range algorithms {
		l := limittest.MustNew(s, limit.Policy{Algorithm: alg, Limit: 1 << 20, Window: time.Hour, FailureMode: limit.FailClosed},
			limit.WithKeyPrefix(prefix))
		reqs := make([]limit.Request, 1000)
		for i := range reqs {
			reqs[i] = limit.Request{Route: "/r", Method: "GET", Path: "/r", Peer: fmt.Sprintf("10.0.%d.%d:1000", i>>8, i&255)}
		}
		const goroutines, each = 64, 200
		run := func() {
			var wg sync.WaitGroup
			for k := range goroutines {
				wg.Go(func() {
					for i := range each {
						if d := l.Check(context.Background(), reqs[(k*each+i)%len(reqs)], limittest.Discard); d.StoreFailed || !d.Allowed {
							t.Errorf("decision %+v", d)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		run() // warm up: keys, pools, connections
		callsBefore := len(g.batchCalls())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		run()
		runtime.ReadMemStats(&after)
		calls := len(g.batchCalls()) - callsBefore
		per := float64(after.Mallocs-before.Mallocs) / (goroutines * each)
		t.Logf("%s: %.2f allocations per decision, %d decisions in %d script calls", alg, per, goroutines*each, calls)
		if per > 2 {
			t.Errorf("%s: %.2f allocations per decision through Limiter.Check, want <= 2", alg, per)
		}
		if calls >= goroutines*each {
			t.Errorf("%s: %d script calls for %d decisions: not batched", alg, calls, goroutines*each)
		}
	}
}

// TestClosedStoreFailsQueuedTakes: Takes queued when the Store is closed
// return ErrClosed at once, and are never sent.
func TestClosedStoreFailsQueuedTakes(t *testing.T) {
	forOneServer(t, func(t *testing.T, be *backend) {
		prefix, client, s, _, r := gatedStore(t, be)
		op := oneQuota(prefix+":{closed}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
		ch, queued := r.start(context.Background(), &op)
		if !queued {
			t.Fatal("the Take reached Redis while the calls were held; want it queued")
		}
		s.Close()
		if o := r.wait(ch); !errors.Is(o.err, ErrClosed) {
			t.Fatalf("queued Take after Close: %+v, want ErrClosed", o)
		}
		r.release()
		for _, ch := range r.fillers {
			r.wait(ch) // the held calls end either way; the queued filler got ErrClosed
		}
		if n, err := client.Do(context.Background(), client.B().Exists().Key(string(op.Quotas[0].Key)).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("EXISTS of the closed Store's queued key: %d, %v; want 0 (never sent)", n, err)
		}
	})
}

// Randomized flights: TestBatchRandomFlightsAsOneByOne.

// batchSeed adds a seed to TestBatchRandomFlightsAsOneByOne's fixed list
// (go test -run BatchRandom ./redisstore/ -batchseed=N), as does the
// environment variable envBatchSeed.
var batchSeed = flag.String("batchseed", "", "one more seed for TestBatchRandomFlightsAsOneByOne (also $"+envBatchSeed+")")

const envBatchSeed = "QUOTAGATE_BATCH_SEED"

// The bounds of a flight in stores/redis/batch.go (maxBatchOps,
// maxBatchKeys: key uses, each Op's counted; maxBatchBytes: each Op's keys
// and argument): the bound flights sit at them and one over.
const (
	flightOps   = 64
	flightKeys  = 255
	flightBytes = 64 << 10
)

// TestBatchRandomFlightsAsOneByOne: seeded random flights, each compared
// with the same Ops sent one by one (in the flight's order) on a mirrored
// key set: every Result field, every error (an Op on a key of another type
// fails WRONGTYPE, alone), the stored bytes of every key the flight
// touched (and its PTTL on miniredis), and at the end the same keys on
// both sides. The flights mix the three algorithms, policies of several
// limits on one key, Ops of 1 to MaxQuotas quotas (now and then the same
// key twice in one Op), refunds, costs up to the largest capacity plus
// one, shared and distinct arguments, a few hot keys or many, keys holding
// a hash, a list, a short string or a dead 40-byte value, binary key
// bytes; flights at each bound (64 Ops; 255 keys, every one distinct, so
// that KEYS indexes reach 255; 64 KiB) and one over it, where the Op that
// does not fit must go in a call of its own (checked on the calls; ARGV
// has at most 65 entries: an argument per Op and the heads); and 3 to 5
// flights queued at once on one Store, so that its runners reuse their
// flights' buffers and index maps (each on keys of its own, but for a key
// of another type and a key only ever denied, which every one of them
// has: a stale index shows there).
//
// On the caller's clock every Op has its own instant (the same ms, small
// steps, steps back within and beyond the 1 s of skew, window boundaries,
// hours). On miniredis the server's clock is frozen with SetTime and moved
// between flights, so the comparison is exact there too; on a real server
// the clock runs, so its windows have now in their middle and its buckets
// refill slowly, and the instant's fields are left out (the window index,
// whether a quota retries and whether it writes are kept), and of the
// stored values the length and a window's state.
func TestBatchRandomFlightsAsOneByOne(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	fixed := len(seeds)
	for _, v := range []string{*batchSeed, os.Getenv(envBatchSeed)} {
		if v == "" {
			continue
		}
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("seed %q: %v", v, err)
		}
		seeds = append(seeds, s)
	}
	// rfKeysBound is the 64 Ops bound too.
	bounds := []rfShape{rfKeysBound, rfOpsOver, rfKeysOver, rfBytesBound, rfBytesOver}
	forOneServer(t, func(t *testing.T, be *backend) {
		client := be.newClient(t)
		for c, callerClock := range []bool{true, false} {
			for i, seed := range seeds {
				// On a real server, and for an added seed: flights on
				// one Store, random flights, every bound. On miniredis (a
				// new Lua interpreter per script call: an Op one by one
				// costs milliseconds under -race) a fixed seed has
				// flights on one Store, a random flight and a 64 KiB
				// bound, and three of the six runs one of the 64-Op
				// bounds each (255 keys, 65 Ops, 256 keys).
				shapes := append([]rfShape{rfReuse, rfRandom, rfRandom, rfRandom}, bounds...)
				if !be.real && i < fixed {
					j := c*fixed + i
					shapes = []rfShape{rfReuse, rfRandom, bounds[3+j%2]}
					if j%2 == 0 && j/2 < 3 {
						shapes = append(shapes, bounds[j/2])
					}
				}
				t.Run(fmt.Sprintf("caller-clock=%v/seed=%d", callerClock, seed), func(t *testing.T) {
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("seed %d: rerun with  go test -race -run 'TestBatchRandomFlightsAsOneByOne' ./redisstore/ -batchseed=%d", seed, seed)
						}
					})
					newRandomFlights(t, be, client, callerClock, seed).run(shapes)
				})
			}
		}
	})
}

// randomFlights is one seed's run: a pool of keys, the clock, the Store
// that sends the same Ops one by one.
type randomFlights struct {
	t           *testing.T
	be          *backend
	client      rueidis.Client
	rng         *rand.Rand
	callerClock bool
	fake        bool         // the instants are the test's: the caller's clock, or miniredis's TIME
	now         atomic.Int64 // the caller's clock, or the server's (miniredis: set; real: about)
	t0          int64        // the real server's clock at the start
	opts        []Option
	alone       *Store
	prefix      string
	pa, pb      string // the flights' key set and the one-by-one set
	pool        []*rfKey
	made        int // keys made
	flights     int
	groups      int // the flights of rfReuse
	stats       struct{ ops, denied, refunds, wrongs, maxKeys, maxArgs int }
}

// rfKey is a key of the pool: its name after the set's prefix, its
// algorithm, the policies an Op on it may use (a policy whose limit
// changed: same window and phase), and what the test stored under it.
type rfKey struct {
	id   string
	alg  limit.Algorithm
	pols []limitstore.Quota
	kind string // "": the store's; "hash", "list": another type; "short", "dead": a string the store did not write
}

func (k *rfKey) otherType() bool { return k.kind == "hash" || k.kind == "list" }

// rfOp is one Op of a flight: a on the flights' keys, b on the one-by-one
// set's, decided at now (the caller's clock).
type rfOp struct {
	a, b limitstore.Op
	keys [limitstore.MaxQuotas]*rfKey
	now  int64
}

func newRandomFlights(t *testing.T, be *backend, client rueidis.Client, callerClock bool, seed uint64) *randomFlights {
	salt := uint64(0x9e3779b97f4a7c15)
	if callerClock {
		salt++
	}
	r := &randomFlights{t: t, be: be, client: client, rng: rand.New(rand.NewPCG(seed, salt)),
		callerClock: callerClock, fake: callerClock || be.mini != nil}
	r.prefix = testPrefix(t)
	r.pa, r.pb = r.prefix+":a", r.prefix+":b"
	t.Cleanup(func() { deleteKeys(t, client, r.prefix) })
	r.t0 = time.Now().UnixMilli()
	r.now.Store(r.t0)
	if callerClock {
		r.opts = append(r.opts, WithClock(func() time.Time { return time.UnixMilli(r.now.Load()) }))
	}
	if !callerClock && be.mini != nil {
		be.mini.SetTime(time.UnixMilli(r.t0))
		t.Cleanup(func() { be.mini.SetTime(time.Time{}) })
	}
	var err error
	if r.alone, err = New(client, r.opts...); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *randomFlights) run(shapes []rfShape) {
	t := r.t
	// The scripts are loaded before any call is held (a first EVALSHA
	// answers NOSCRIPT).
	warm := oneQuota(r.prefix+":{warm}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	if _, err := r.alone.Take(ctxT(t), &warm); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"hash", "list", "short", "dead"} {
		r.pool = append(r.pool, r.newKey(kind))
	}
	for range 26 {
		kind := ""
		if r.rng.IntN(16) == 0 {
			kind = []string{"hash", "list", "short", "dead"}[r.rng.IntN(4)]
		}
		r.pool = append(r.pool, r.newKey(kind))
	}
	r.rng.Shuffle(len(shapes), func(i, j int) { shapes[i], shapes[j] = shapes[j], shapes[i] })
	for _, sh := range shapes {
		r.flight(sh)
		if t.Failed() {
			return
		}
	}
	// The same keys on both sides; the other types untouched.
	a, b := scanKeys(t, r.client, r.pa), scanKeys(t, r.client, r.pb)
	for i := range a {
		a[i] = strings.TrimPrefix(a[i], r.pa)
	}
	for i := range b {
		b[i] = strings.TrimPrefix(b[i], r.pb)
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Errorf("the flights left %d keys, the Ops one by one %d (or other names)", len(a), len(b))
	}
	ctx := ctxT(t)
	for _, k := range r.pool {
		if !k.otherType() {
			continue
		}
		for _, p := range []string{r.pa, r.pb} {
			if typ, err := r.client.Do(ctx, r.client.B().Type().Key(p+k.id).Build()).ToString(); err != nil || typ != k.kind {
				t.Errorf("%q is a %q (%v) after the flights, want the %s", p+k.id, typ, err, k.kind)
			}
		}
	}
	s := r.stats
	t.Logf("%d flights, %d Ops: %d denied, %d refunds, %d WRONGTYPE; up to %d KEYS and %d ARGV in a call",
		r.flights, s.ops, s.denied, s.refunds, s.wrongs, s.maxKeys, s.maxArgs)
}

// pick returns one of xs.
func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// newKey makes a key of the pool (kind: what the test stores under it on
// both sides) with a random algorithm and one or two policies that suit
// the backend and the clock (policy).
func (r *randomFlights) newKey(kind string) *rfKey {
	r.made++
	alg := pick(r.rng, algorithms...)
	letter := map[limit.Algorithm]string{limit.SlidingWindow: "s", limit.FixedWindow: "f", limit.TokenBucket: "g"}[alg]
	k := &rfKey{id: fmt.Sprintf(":{t%d}:%s:%d", r.made%5, letter, r.made), alg: alg, kind: kind}
	if r.rng.IntN(4) == 0 {
		k.id += "\x00\xff\x80{}*?\r\n" // binary-safe end to end
	}
	q := r.policy(alg)
	k.pols = []limitstore.Quota{q}
	if r.rng.IntN(5) == 0 { // the policy's limit (and burst) changed
		v := r.policy(alg)
		v.WindowMS, v.PhaseMS = q.WindowMS, q.PhaseMS
		k.pols = append(k.pols, v)
	}
	if kind == "" {
		return k
	}
	ctx := ctxT(r.t)
	for _, p := range []string{r.pa, r.pb} {
		key := p + k.id
		var cmd rueidis.Completed
		switch kind {
		case "hash":
			cmd = r.client.B().Hset().Key(key).FieldValue().FieldValue("f", "v").Build()
		case "list":
			cmd = r.client.B().Rpush().Key(key).Element("x").Build()
		case "short":
			cmd = r.client.B().Set().Key(key).Value("junk").Build()
		case "dead": // a state that died long ago (expiry 1), key deadline 1
			v := make([]byte, 40)
			v[0], v[8], v[24], v[32] = 7, 2, 1, 1
			cmd = r.client.B().Set().Key(key).Value(string(v)).Build()
		}
		if err := r.client.Do(ctx, cmd).Error(); err != nil {
			r.t.Fatal(err)
		}
	}
	return k
}

// policy is a random quota of alg. On miniredis (TTLs count down only when
// told) anything: windows of 1 ms to a day. A real server expires keys on
// its own clock, and an Op sent one by one later than its flight must find
// what the flight's Op found: on the caller's clock every key lives at
// least 60 s (sliding windows of a minute or more, buckets refilling in a
// minute or more, fixed windows of a day or two with the clock's whole
// range, t0 +- 6 h, in their middle); on the server's clock windows of an
// hour or a day with now in their middle, and buckets gaining a token in
// 10 minutes or more, so that the seconds between a flight and its Ops one
// by one change no decision.
func (r *randomFlights) policy(alg limit.Algorithm) limitstore.Quota {
	q := limitstore.Quota{Algorithm: alg}
	rng := r.rng
	mid := func() int64 { return ((r.t0-q.WindowMS/2)%q.WindowMS + q.WindowMS) % q.WindowMS }
	switch {
	case r.be.mini != nil:
		if alg == limit.TokenBucket {
			q.Limit, q.WindowMS = pick[int64](rng, 1, 3, 5, 10), pick[int64](rng, 1, 1000, 60_000, 86_400_000)
		} else {
			q.Limit, q.WindowMS = pick[int64](rng, 1, 2, 3, 5, 10), pick[int64](rng, 1, 7, 1000, 60_000, 86_400_000)
			q.PhaseMS = rng.Int64N(q.WindowMS)
		}
	case r.callerClock:
		switch alg {
		case limit.SlidingWindow:
			q.Limit, q.WindowMS = pick[int64](rng, 1, 2, 3, 5, 10), pick[int64](rng, 60_000, 600_000, 3_600_000)
			q.PhaseMS = rng.Int64N(q.WindowMS)
		case limit.FixedWindow:
			q.Limit, q.WindowMS = pick[int64](rng, 1, 2, 3, 5, 10), pick[int64](rng, 86_400_000, 172_800_000)
			q.PhaseMS = mid()
		default:
			q.Limit, q.WindowMS = 1+rng.Int64N(6), pick[int64](rng, 600_000, 3_600_000)
		}
	default:
		q.Limit = pick[int64](rng, 1, 2, 3, 5, 6)
		q.WindowMS = pick[int64](rng, 3_600_000, 86_400_000)
		if alg != limit.TokenBucket {
			q.PhaseMS = mid()
		}
	}
	if alg == limit.TokenBucket {
		q.Burst = 1 + rng.Int64N(q.Limit+3)
	}
	return q
}

// step moves the test's clock: the same ms, a few ms, back (within the
// 1 s of skew and beyond), about a window, up to an hour; on a real server
// within t0 +- 6 h (policy).
func (r *randomFlights) step() {
	now := r.now.Load()
	switch x := r.rng.IntN(20); {
	case x < 8:
	case x < 14:
		now += 1 + r.rng.Int64N(30)
	case x < 16:
		now -= 1 + r.rng.Int64N(1500)
	case x < 18:
		k := r.pool[r.rng.IntN(len(r.pool))]
		now += k.pols[0].WindowMS + r.rng.Int64N(3) - 1
	default:
		now += r.rng.Int64N(3_600_000)
	}
	if r.be.mini == nil {
		now = min(max(now, r.t0-6*3_600_000), r.t0+6*3_600_000)
	}
	r.now.Store(now)
}

// refundWindow is a Quota.Window for a refund of cost at now: mostly the
// charge's own (the window now is in, the TAT of a charge just made), else
// another one. On a real server's clock a bucket's is long past or far
// enough ahead that the seconds between the flight and the Ops one by one
// do not change what it gives back.
func (r *randomFlights) refundWindow(q *limitstore.Quota, cost, now int64) int64 {
	rng := r.rng
	if q.Algorithm == limit.TokenBucket {
		charge := (min(cost, q.Burst)*q.WindowMS + q.Limit - 1) / q.Limit
		if !r.fake {
			return pick(rng, now-3_600_000, now+charge+3_600_000)
		}
		return pick(rng, now+charge, now+rng.Int64N(2*charge+2), now-rng.Int64N(q.WindowMS+1), now)
	}
	d := now - q.PhaseMS
	idx := (d - ((d%q.WindowMS)+q.WindowMS)%q.WindowMS) / q.WindowMS
	return idx + pick[int64](rng, 0, 0, 0, -1, 1, -3)
}

// op makes an Op of minN to maxN quotas on keys drawn by next (dups: now
// and then the same key twice), at the caller's clock's next instant.
func (r *randomFlights) op(next func() *rfKey, minN, maxN int, dups bool) rfOp {
	rng := r.rng
	if r.callerClock {
		r.step()
	}
	o := rfOp{now: r.now.Load()}
	n := minN + rng.IntN(maxN-minN+1)
	o.a.N = n
	capMin, capMax := int64(1<<62), int64(0)
	for i := range n {
		k := next()
		if dups && i > 0 && rng.IntN(20) == 0 {
			k = o.keys[rng.IntN(i)]
		}
		o.keys[i] = k
		q := k.pols[rng.IntN(len(k.pols))]
		o.a.Quotas[i] = q
		c := q.Limit
		if q.Algorithm == limit.TokenBucket {
			c = q.Burst
		}
		capMin, capMax = min(capMin, c), max(capMax, c)
	}
	switch x := rng.IntN(10); {
	case x == 0:
		o.a.Cost = 0
	case x < 6:
		o.a.Cost = 1
	case x < 8:
		o.a.Cost = 1 + rng.Int64N(capMin+1)
	case x == 8:
		o.a.Cost = capMin + 1
	default:
		o.a.Cost = rng.Int64N(capMax + 2)
	}
	if rng.IntN(6) == 0 {
		o.a.Refund = true
		for i := range n {
			q := &o.a.Quotas[i]
			q.Window = r.refundWindow(q, o.a.Cost, o.now)
		}
	}
	r.setKeys(&o)
	return o
}

// setKeys sets o's keys on both sides from its rfKeys.
func (r *randomFlights) setKeys(o *rfOp) {
	o.b = o.a
	for i := range o.a.N {
		o.a.Quotas[i].Key = []byte(r.pa + o.keys[i].id)
		o.b.Quotas[i].Key = []byte(r.pb + o.keys[i].id)
	}
}

// hot is a random handful of the pool (1 to 40 keys): the flight's keys,
// so that a key often comes back in it.
func (r *randomFlights) hot() func() *rfKey {
	n := 1 + r.rng.IntN(min(len(r.pool), 40))
	var ks []*rfKey
	for _, i := range r.rng.Perm(len(r.pool))[:n] {
		ks = append(ks, r.pool[i])
	}
	return func() *rfKey {
		if r.rng.IntN(10) == 0 { // a new key, in the pool from now on
			k := r.newKey("")
			r.pool = append(r.pool, k)
			ks = append(ks, k)
			return k
		}
		return ks[r.rng.IntN(len(ks))]
	}
}

// fresh returns a new key each call, added to the pool.
func (r *randomFlights) fresh() *rfKey {
	k := r.newKey("")
	r.pool = append(r.pool, k)
	return k
}

// distinct returns a function handing out n distinct keys: the pool's,
// shuffled, then new ones.
func (r *randomFlights) distinct(n int) func() *rfKey {
	ks := slices.Clone(r.pool)
	r.rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	for len(ks) < n {
		ks = append(ks, r.fresh())
	}
	return func() *rfKey {
		k := ks[0]
		ks = ks[1:]
		return k
	}
}

// rfShape is what a flight tests.
type rfShape int

const (
	rfRandom     rfShape = iota // 1 to 31 random Ops on hot keys
	rfOpsOver                   // 65 Ops: the last in a call of its own
	rfBytesBound                // 64 KiB of keys and arguments
	rfBytesOver                 // 64 KiB + 1: the last Op in a call of its own
	rfKeysBound                 // 255 keys, all distinct, and 64 Ops
	rfKeysOver                  // 256 keys: the last Op in a call of its own
	rfReuse                     // 3 to 5 flights of about 64 KiB on one Store, each on keys of its own
)

func (s rfShape) String() string {
	return [...]string{"random", "65 Ops", "64 KiB", "64 KiB + 1 byte", "255 keys", "256 keys", "flights on one Store"}[s]
}

// opBytes is what an Op counts against flightBytes: its keys and its
// argument (the Store's waiter.encode).
func opBytes(op *limitstore.Op) int {
	n := 16
	for i := range op.N {
		n += len(op.Quotas[i].Key) + 32
		if op.Refund {
			n += 8
		}
	}
	return n
}

// flightsOf is how the Store cuts a queue of Ops into flights (batch.go's
// fill): the number of Ops in each.
func flightsOf(ops []*limitstore.Op) []int {
	var out []int
	k, size, nk := 0, 0, 0
	for _, op := range ops {
		if k == flightOps || (k > 0 && (size+opBytes(op) > flightBytes || nk+op.N > flightKeys)) {
			out = append(out, k)
			k, size, nk = 0, 0, 0
		}
		k, size, nk = k+1, size+opBytes(op), nk+op.N
	}
	return append(out, k)
}

// ops makes a flight's Ops for shape, behind the queued filler.
func (r *randomFlights) ops(shape rfShape, filler *limitstore.Op) []rfOp {
	var ops []rfOp
	switch shape {
	case rfRandom:
		next := r.hot()
		for range 1 + r.rng.IntN(31) {
			ops = append(ops, r.op(next, 1, limitstore.MaxQuotas, true))
		}
	case rfOpsOver: // at most 3 quotas: 64 * 3 < 255 keys
		next := r.hot()
		for range flightOps - 1 {
			ops = append(ops, r.op(next, 1, 3, true))
		}
		// On keys of its own: its call may run first.
		ops = append(ops, r.op(r.fresh, 1, 3, false))
	case rfKeysBound, rfKeysOver: // the filler's 3 (4) keys and 63 Ops of 4: 64 Ops
		next := r.distinct((flightOps - 1) * limitstore.MaxQuotas)
		for range flightOps - 1 {
			ops = append(ops, r.op(next, limitstore.MaxQuotas, limitstore.MaxQuotas, false))
		}
	case rfBytesBound, rfBytesOver:
		next := r.hot()
		for range 1 + r.rng.IntN(8) {
			ops = append(ops, r.op(next, 1, limitstore.MaxQuotas, true))
		}
		// An Op on a key of its own, out of the pool, whose name fills the
		// flight to exactly 64 KiB (and one byte more with the last Op).
		pad := r.newKey("")
		o := r.op(func() *rfKey { return pad }, 1, 1, false)
		at := r.rng.IntN(len(ops) + 1)
		ops = slices.Insert(ops, at, o)
		if shape == rfBytesOver {
			ops = append(ops, r.op(r.fresh, 1, 2, false))
		}
		size, target := opBytes(filler), flightBytes
		for i := range ops {
			size += opBytes(&ops[i].a)
		}
		if shape == rfBytesOver {
			target++
		}
		pad.id += strings.Repeat("p", target-size)
		r.setKeys(&ops[at])
	case rfReuse:
		// Flights queued back to back, each cut by the 64 KiB bound (its
		// first Op's key is long), each on keys of its own: their calls
		// go out 2 or 3 at once, in any order, and the runners reuse
		// their flights' buffers and maps. But for two keys every flight
		// has, whose Ops come out the same in any order: the pool's hash
		// (WRONGTYPE, alone and beside a key of the flight's) and a key
		// only ever asked more than its capacity (denied, never written).
		size := opBytes(filler)
		r.groups = 3 + r.rng.IntN(3)
		never := r.fresh()
		hash := r.pool[slices.IndexFunc(r.pool, func(k *rfKey) bool { return k.kind == "hash" })]
		for range r.groups {
			hot := []*rfKey{r.fresh(), r.fresh(), r.fresh()}
			next := func() *rfKey { return hot[r.rng.IntN(len(hot))] }
			pad := r.newKey("")
			at := len(ops)
			ops = append(ops, r.op(func() *rfKey { return pad }, 1, 1, false))
			for range 1 + r.rng.IntN(4) {
				ops = append(ops, r.op(next, 1, limitstore.MaxQuotas, true))
			}
			o := r.op(func() *rfKey { return never }, 1, 1, false)
			q := &o.a.Quotas[0]
			o.a.Cost, o.a.Refund = max(q.Limit, q.Burst)+1, false
			r.setKeys(&o)
			ops = slices.Insert(ops, at+1+r.rng.IntN(len(ops)-at), o)
			shared := []*rfKey{hot[0], hash}
			ops = slices.Insert(ops, at+1+r.rng.IntN(len(ops)-at), r.op(func() *rfKey {
				k := shared[0]
				shared = shared[1:]
				return k
			}, 2, 2, false))
			ops = slices.Insert(ops, at+1+r.rng.IntN(len(ops)-at), r.op(func() *rfKey { return hash }, 1, 1, false))
			for i := at; i < len(ops); i++ {
				size += opBytes(&ops[i].a)
			}
			pad.id += strings.Repeat("p", flightBytes-r.rng.IntN(200)-size)
			r.setKeys(&ops[at])
			size = 0
		}
	}
	return ops
}

// flight runs one flight of shape: a fresh Store on a gated client, its
// calls held by fillers (the one that queued is the flight's first Op),
// the Ops queued in order, released; then the same Ops one by one on the
// other key set, compared.
func (r *randomFlights) flight(shape rfShape) {
	t := r.t
	r.flights++
	fp := fmt.Sprintf("%s:fill%d", r.prefix, r.flights)
	fillerN := 1
	switch shape {
	case rfKeysBound:
		fillerN = 3
	case rfKeysOver:
		fillerN = 4
	}
	switch {
	case !r.fake:
		r.now.Store(time.Now().UnixMilli())
	case !r.callerClock: // miniredis's TIME, frozen for the flight and its Ops one by one
		r.step()
		r.be.mini.SetTime(time.UnixMilli(r.now.Load()))
	}
	g := newGated(r.client)
	s, err := New(g, r.opts...)
	if err != nil {
		t.Fatal(err)
	}
	var filler limitstore.Op
	fillerNow := r.now.Load() // the fillers' clock
	run := startGatedWith(t, s, g, func(i int) limitstore.Op {
		filler = limitstore.Op{Cost: 1, N: fillerN}
		for j := range fillerN {
			filler.Quotas[j] = limitstore.Quota{Key: []byte(fmt.Sprintf("%s:{f%d}:%d", fp, i, j)),
				Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}
		}
		return filler
	})
	held := run.held
	ops := r.ops(shape, &filler)
	queue := []*limitstore.Op{&filler}
	for i := range ops {
		queue = append(queue, &ops[i].a)
	}
	want := flightsOf(queue)
	switch shape {
	case rfOpsOver, rfBytesOver, rfKeysOver:
		if len(want) != 2 || want[1] != 1 {
			t.Fatalf("%s: the Ops would go in calls of %v Ops; want the last alone", shape, want)
		}
	case rfReuse:
		if len(want) != r.groups {
			t.Fatalf("%s: the Ops would go in calls of %v Ops; want %d", shape, want, r.groups)
		}
	default:
		if len(want) != 1 {
			t.Fatalf("%s: the Ops would go in calls of %v Ops; want one", shape, want)
		}
	}
	chs := make([]chan outcome, len(ops))
	for i := range ops {
		r.now.Store(ops[i].now) // the caller's clock (else unused)
		var queued bool
		// No deadline: the Ops wait for a call to return (or, behind a
		// whole flight, the flush timer), in this order.
		if chs[i], queued = run.start(context.Background(), &ops[i].a); !queued {
			t.Fatalf("%s: Op %d reached Redis while the calls were held; want it queued", shape, i)
		}
	}
	run.releaseAll()
	got := make([]outcome, len(ops))
	for i, ch := range chs {
		got[i] = run.wait(ch)
	}
	// The first call's distinct arguments and keys (ARGV and KEYS indexes).
	args, keys := map[string]bool{argOf(&filler, fillerNow, r.callerClock): true}, map[string]bool{}
	for i, op := range queue[:want[0]] {
		if i > 0 {
			args[argOf(op, ops[i-1].now, r.callerClock)] = true
		}
		for j := range op.N {
			keys[string(op.Quotas[j].Key)] = true
		}
	}
	r.stats.maxArgs, r.stats.maxKeys = max(r.stats.maxArgs, len(args)+1), max(r.stats.maxKeys, len(keys))
	calls := g.batchCalls()[held:]
	slices.Sort(calls)
	slices.Sort(want)
	if !slices.Equal(calls, want) {
		t.Fatalf("%s: script calls by Op count %v after the %d held; want %v", shape, calls, held, want)
	}

	ctx := ctxT(t)
	var touched []*rfKey
	seen := map[*rfKey]bool{}
	for i := range ops {
		o := &ops[i]
		r.now.Store(o.now)
		res, err := r.alone.Take(ctx, &o.b)
		if msg := r.differ(o, got[i], outcome{res, err}); msg != "" {
			t.Errorf("flight %d (%s), Op %d of %d %s: %s", r.flights, shape, i, len(ops), describeOp(&o.a, r.pa), msg)
		}
		for _, k := range o.keys[:o.a.N] {
			if !seen[k] {
				seen[k] = true
				touched = append(touched, k)
			}
		}
	}
	r.compareStored(shape, touched)
	r.stats.ops += len(ops)
}

// differ describes how the flight's outcome a of o differs from the one by
// one outcome b ("" when it does not): on a frozen or caller's clock every
// field; on a real server's clock the fields that do not depend on the
// instant (see TestBatchRandomFlightsAsOneByOne).
func (r *randomFlights) differ(o *rfOp, a, b outcome) string {
	other := slices.ContainsFunc(o.keys[:o.a.N], (*rfKey).otherType)
	if a.err != nil || b.err != nil {
		if a.err == nil || b.err == nil || !other ||
			!strings.Contains(a.err.Error(), "WRONGTYPE") || !strings.Contains(b.err.Error(), "WRONGTYPE") {
			return fmt.Sprintf("batched error %v, one by one %v (a key of another type: %v)", a.err, b.err, other)
		}
		r.stats.wrongs++
		return ""
	}
	if other {
		return fmt.Sprintf("decided (%+v) on a key of another type, want WRONGTYPE", a.res)
	}
	if !b.res.Allowed {
		r.stats.denied++
	}
	if o.a.Refund {
		r.stats.refunds++
	}
	ra, rb := a.res, b.res
	if !r.fake {
		ra, rb = serverClockView(&o.a, ra), serverClockView(&o.a, rb)
	}
	if !reflect.DeepEqual(ra, rb) {
		return fmt.Sprintf("batched %+v, one by one %+v", a.res, b.res)
	}
	return ""
}

// serverClockView is res without what depends on the instant on a running
// server clock: now, the delays, a bucket's TAT; what stays is whether a
// quota retries and whether it writes, and a window's index.
func serverClockView(op *limitstore.Op, res limitstore.Result) limitstore.Result {
	res.NowMS = 0
	for i := range res.Quotas {
		q := &res.Quotas[i]
		q.RetryAfterMS, q.ResetAfterMS, q.TTLMS = min(q.RetryAfterMS, 1), 0, min(q.TTLMS, 1)
		if i >= op.N || op.Quotas[i].Algorithm == limit.TokenBucket {
			q.Window = 0
		}
	}
	return res
}

// compareStored compares the values under keys on both sides: the bytes
// (on a real server's clock the length, and a window's state), and on
// miniredis the PTTL, elsewhere whether the key has a deadline.
func (r *randomFlights) compareStored(shape rfShape, keys []*rfKey) {
	t := r.t
	var cmds rueidis.Commands
	var ks []*rfKey
	for _, k := range keys {
		if k.otherType() {
			continue
		}
		ks = append(ks, k)
		for _, p := range []string{r.pa, r.pb} {
			cmds = append(cmds, r.client.B().Get().Key(p+k.id).Build(), r.client.B().Pttl().Key(p+k.id).Build())
		}
	}
	resps := r.client.DoMulti(ctxT(t), cmds...)
	for i, k := range ks {
		va, ea := resps[4*i].ToString()
		pa, epa := resps[4*i+1].AsInt64()
		vb, eb := resps[4*i+2].ToString()
		pb, epb := resps[4*i+3].AsInt64()
		bad := ""
		switch {
		case epa != nil || epb != nil || (ea != nil && !rueidis.IsRedisNil(ea)) || (eb != nil && !rueidis.IsRedisNil(eb)):
			bad = fmt.Sprintf("errors %v, %v, %v, %v", ea, epa, eb, epb)
		case (ea == nil) != (eb == nil):
			bad = "exists on one side only"
		case r.fake && va != vb, !r.fake && !sameServerClockValue(k, va, vb):
			bad = "different values"
		case r.be.mini != nil && pa != pb, (pa < 0 || pb < 0) && pa != pb:
			bad = "different PTTLs"
		}
		if bad != "" {
			t.Errorf("flight %d (%s), key %q: %s: batched %x (PTTL %d), one by one %x (PTTL %d)",
				r.flights, shape, k.id, bad, va, pa, vb, pb)
		}
	}
}

// sameServerClockValue: two values written at other instants: the same
// length, and for a window the same state (index, count, previous count).
func sameServerClockValue(k *rfKey, a, b string) bool {
	switch {
	case len(a) != len(b):
		return false
	case len(a) != 40:
		return a == b
	case k.alg != limit.TokenBucket:
		return a[:24] == b[:24]
	}
	return true
}

// argOf is op's argument as the Store encodes it (waiter.encode), at now
// on the caller's clock (else 0: the server's TIME).
func argOf(op *limitstore.Op, now int64, callerClock bool) string {
	if !callerClock {
		now = 0
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(now))
	b = binary.LittleEndian.AppendUint64(b, uint64(op.Cost))
	for i := range op.N {
		q := &op.Quotas[i]
		x := q.PhaseMS
		if q.Algorithm == limit.TokenBucket {
			x = q.Burst
		}
		for _, v := range []int64{int64(q.Algorithm), q.Limit, q.WindowMS, x} {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		if op.Refund {
			b = binary.LittleEndian.AppendUint64(b, uint64(q.Window))
		}
	}
	return string(b)
}

// describeOp is op in a line, its keys without the set's prefix.
func describeOp(op *limitstore.Op, prefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{cost %d refund %v:", op.Cost, op.Refund)
	for i := range op.N {
		q := &op.Quotas[i]
		k := strings.TrimPrefix(string(q.Key), prefix)
		if len(k) > 40 {
			k = k[:40] + "..."
		}
		fmt.Fprintf(&b, " %q %v %d/%dms phase %d burst %d window %d;", k, q.Algorithm, q.Limit, q.WindowMS, q.PhaseMS, q.Burst, q.Window)
	}
	return b.String() + "}"
}
