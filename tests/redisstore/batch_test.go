package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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
// argument, n key indexes; the arguments follow); 0 for neither.
func opsOf(args []string) int {
	if len(args) == 1 {
		return 1
	}
	if len(args) == 0 {
		return 0
	}
	h, ops := args[0], 0
	for len(h) >= 2 {
		n := int(h[0])
		if n < 1 || n > limit.MaxQuotas || int(h[1]) < 2 || int(h[1]) > len(args) || len(h) < 2+n {
			return 0
		}
		h, ops = h[2+n:], ops+1
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
	res limit.Result
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
	return startGatedWith(t, s, g, func(i int) limit.Op {
		return oneQuota(fmt.Sprintf("%s:{fill%d}:f", fillerPrefix, i),
			limit.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	})
}

// startGatedWith is startGated with the fillers' Ops made by filler (the
// i-th filler's; each on keys of its own): the last one made is the one
// that queued, the first Op of the flight.
func startGatedWith(t *testing.T, s *Store, g *gatedClient, filler func(i int) limit.Op) *gatedRun {
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
func (r *gatedRun) start(ctx context.Context, op *limit.Op) (ch chan outcome, queued bool) {
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
func neverSent(t *testing.T, client rueidis.Client, op *limit.Op) {
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
func batchOps(prefix string, now int64) []limit.Op {
	qs := map[limit.Algorithm]limit.Quota{
		limit.SlidingWindow: {Algorithm: limit.SlidingWindow, Limit: 3, WindowMS: 60_000, PhaseMS: 1234},
		limit.FixedWindow:   {Algorithm: limit.FixedWindow, Limit: 3, WindowMS: 60_000, PhaseMS: 4321},
		limit.TokenBucket:   {Algorithm: limit.TokenBucket, Limit: 3, Burst: 3, WindowMS: 60_000},
	}
	var ops []limit.Op
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
	multi := func(n int) limit.Op {
		op := limit.Op{Cost: 1, N: n}
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
	warm := oneQuota(prefix+":{warm}:f", limit.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
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
func instantFree(r limit.Result) limit.Result {
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
	s, err := New(g)
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
		op := oneQuota(prefix+":{gone}:f", limit.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
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
		ops := make([]limit.Op, 3)
		chs := make([]chan outcome, 3)
		ctx, cancel := context.WithCancel(context.Background())
		for i := range ops {
			ops[i] = oneQuota(fmt.Sprintf("%s:{m%d}:f", prefix, i), limit.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
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
					limit.WithKeyPrefix(prefix), limit.WithStoreTimeout(10*time.Second))
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
			limit.WithKeyPrefix(prefix), limit.WithStoreTimeout(10*time.Second))
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
		op := oneQuota(prefix+":{closed}:f", limit.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
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
