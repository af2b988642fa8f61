package redisstore_test

import (
	"context"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"reflect"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
)

// batchOps are Ops of every kind, under prefix: the same key several times
// (it runs out), an Op of two quotas and one of three, refunds, costs, a
// key holding a hash (WRONGTYPE) in the middle and as the second key of an
// Op of two quotas at the end, every algorithm. now is
// the caller's clock they are decided at (the refunds' windows follow it);
// the windows' phases put their boundaries 30 s and 33 s away from it, so
// that a run on the server's clock, later than now and batched and one by
// one at different instants, never sees a window roll in between.
func batchOps(prefix string, now int64) []limitstore.Op {
	qs := map[limit.Algorithm]limitstore.Quota{
		limit.SlidingWindow: {Algorithm: limit.SlidingWindow, Limit: 3, WindowMS: 60_000, PhaseMS: (now + 30_000) % 60_000},
		limit.FixedWindow:   {Algorithm: limit.FixedWindow, Limit: 3, WindowMS: 60_000, PhaseMS: (now + 33_000) % 60_000},
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
	batched, err := New(g, append(opts, WithoutGuard())...)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := New(client, append(opts, WithoutGuard())...)
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
	if _, err := limittest.Take(ctx, alone, &warm); err != nil {
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
		res, err := limittest.Take(ctx, alone, &opsB[i])
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
