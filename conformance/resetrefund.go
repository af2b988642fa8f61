package conformance

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// resetThenRefund: charges taken before a Reset and given back after it
// give nothing back to the identity's new usage, for every kind of
// give-back the engine sends (a Refund of a charge of each algorithm, of
// several quotas at once, and of a token bucket's reserved slot), while a
// charge of the new usage is given back as ever; every Result is the
// model's, field by field (the epochs included), and a second Reset moves
// the epoch on again.
func resetThenRefund(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	kinds := []struct {
		name string
		op   limitstore.Op
	}{
		{"fixed-window", oneQuota("conformance:{rr1}:b:f:r:id", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 60_000, PhaseMS: 123})},
		{"sliding-window", oneQuota("conformance:{rr2}:b:s:r:id", limitstore.Quota{Algorithm: limit.SlidingWindow, Limit: 5, WindowMS: 60_000, PhaseMS: 7})},
		{"token-bucket", oneQuota("conformance:{rr3}:b:g:r:id", limitstore.Quota{Algorithm: limit.TokenBucket, Limit: 5, WindowMS: 60_000, Burst: 5})},
		{"reservation", oneQuota("conformance:{rr4}:b:gw:r:id", limitstore.Quota{Algorithm: limit.TokenBucket, Limit: 10, WindowMS: 1000, Burst: 1, MaxWaitMS: 5000})},
		{"two-quotas", func() limitstore.Op {
			op := oneQuota("conformance:{rr5}:b1:f:r:id", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 60_000})
			op.N, op.Quotas[1] = 2, limitstore.Quota{Key: []byte("conformance:{rr5}:b2:f:r:id"), Algorithm: limit.FixedWindow, Limit: 9, WindowMS: 3_600_000}
			return op
		}()},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			clock := limittest.NewClock(epoch)
			store := newStore(t, clock.Now)
			rs := resetter(t, store)
			ref := &model{m: map[string]modelEntry{}}
			var keys [][]byte
			for j := range k.op.N {
				keys = append(keys, k.op.Quotas[j].Key)
			}
			if k.op.Quotas[0].MaxWaitMS > 0 {
				k.op.WaitMS = k.op.Quotas[0].MaxWaitMS
			}
			step := 0
			// do sends op to the store and the model at the clock's now;
			// for an admitted take it returns the charge to give back.
			do := func(op limitstore.Op) (limitstore.Result, limitstore.Op) {
				t.Helper()
				step++
				now := clock.Now().UnixMilli()
				want := ref.take(&op, now)
				got, err := limittest.Take(ctx, store, &op)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				for j := range limitstore.MaxQuotas {
					got.Quotas[j].TTLMS, want.Quotas[j].TTLMS = 0, 0
				}
				if got != want {
					t.Fatalf("step %d (%+v at %d):\n got %+v\nwant %+v", step, op, now, got, want)
				}
				charge := op
				charge.Refund, charge.WaitMS = true, 0
				for j := range op.N {
					charge.Quotas[j].Window, charge.Quotas[j].Epoch = got.Quotas[j].Window, got.Quotas[j].Epoch
				}
				return got, charge
			}
			reset := func() {
				t.Helper()
				ref.reset(keys, clock.Now().UnixMilli())
				if err := rs.Reset(ctx, keys); err != nil {
					t.Fatal(err)
				}
			}
			for epochN := int64(1); epochN <= 2; epochN++ {
				var before []limitstore.Op
				for range 3 {
					res, c := do(k.op)
					if !res.Allowed {
						t.Fatalf("a charge before Reset %d refused: %+v", epochN, res)
					}
					before = append(before, c)
					clock.Advance(10 * time.Millisecond)
				}
				reset()
				clock.Advance(10 * time.Millisecond)
				res, after := do(k.op)
				if !res.Allowed || res.Quotas[0].Epoch != epochN {
					t.Fatalf("the charge after Reset %d: %+v, want admitted in epoch %d", epochN, res, epochN)
				}
				clock.Advance(10 * time.Millisecond)
				// The charges of the old usage: nothing given back.
				for _, c := range before {
					do(c)
				}
				probe := k.op
				probe.Peek, probe.WaitMS = true, 0
				if peek, _ := do(probe); peek.Allowed {
					if got, want := peek.Quotas[0].Remaining, k.op.Quotas[0].Limit-2; k.op.Quotas[0].MaxWaitMS == 0 && got != want {
						t.Fatalf("after the old charges' refunds: Remaining %d, want %d (the new charge and the peek's own)", got, want)
					}
				}
				// The new usage's own charge is given back.
				do(after)
				do(probe)
			}
		})
	}
}

// resetThenRefundThroughLimiters: a request charged before a Reset whose
// charge Finish gives back after it (Policy.CountStatus) gives nothing back
// to the new usage, for every algorithm, several quotas and plans: every
// Decision and Peek is the reference store's, field by field, and the
// identity's count after it is exactly what was charged after the Reset.
func resetThenRefundThroughLimiters(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := limittest.NewClock(epoch)
			p := multiPolicy(alg)
			p.Name = "reset-refund-" + alg.String()
			p.CountStatus = func(status int) bool { return status >= 400 }
			opts := []limit.Option{limit.WithKeyPrefix("conformance")}
			s := newStore(t, clock.Now)
			resetter(t, s)
			got, err := limit.New(s, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			want, err := limit.New(limittest.NewStore(clock.Now), p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "pro-a"} {
				same := func(what string, dg, dw limit.Decision, eg, ew error) limit.Decision {
					t.Helper()
					if eg != nil || ew != nil {
						t.Fatalf("%s %s: %v / reference %v", id, what, eg, ew)
					}
					if !sameDecision(dg, dw) {
						t.Fatalf("%s %s at %v:\n got %+v\nwant %+v", id, what, clock.Now().UnixMilli(), dg, dw)
					}
					return dg
				}
				peek := func(what string) limit.Decision {
					t.Helper()
					dg, dw, eg, ew := peekBoth(ctx, got, want, id)
					return same(what, dg, dw, eg, ew)
				}
				var held [2][]limit.Decision // in flight across the Reset: on the store, on the reference
				for range 2 {
					dg, eg := got.Consume(ctx, id)
					dw, ew := want.Consume(ctx, id)
					same("before the Reset", dg, dw, eg, ew)
					held[0], held[1] = append(held[0], dg), append(held[1], dw)
				}
				fresh := peek("a Peek before the Reset")
				clock.Advance(5 * time.Millisecond)
				if eg, ew := got.Reset(ctx, id), want.Reset(ctx, id); eg != nil || ew != nil {
					t.Fatalf("Reset: %v / reference %v", eg, ew)
				}
				dg, eg := got.Consume(ctx, id)
				dw, ew := want.Consume(ctx, id)
				same("after the Reset", dg, dw, eg, ew)
				counted := peek("a Peek after the Reset's charge")
				for i := range held[0] {
					got.Finish(ctx, &held[0][i], 200) // not counted: given back
					want.Finish(ctx, &held[1][i], 200)
				}
				after := peek("a Peek after the refunds")
				if after.Remaining != counted.Remaining || after.Remaining <= fresh.Remaining {
					t.Fatalf("%s: Remaining %d after refunds of charges before the Reset (%d before it), want %d (only the charge after it counted)", id, after.Remaining, fresh.Remaining, counted.Remaining)
				}
				// The new usage's own charge is given back.
				got.Finish(ctx, &dg, 200)
				want.Finish(ctx, &dw, 200)
				peek("a Peek after the new charge's refund")
			}
		})
	}
}

// peekBoth is the Peek of id through got and through want.
func peekBoth(ctx context.Context, got, want *limit.Limiter, id string) (limit.Decision, limit.Decision, error, error) {
	dg, eg := got.Peek(ctx, id)
	dw, ew := want.Peek(ctx, id)
	if eg == nil && ew == nil && dg.Identity() != dw.Identity() {
		eg = fmt.Errorf("identity %q, the reference's %q", dg.Identity(), dw.Identity())
	}
	return dg, dw, eg, ew
}

// resetThenLaterMountRefund: a request charged by an outer mount before a
// Reset of its identity, and limited by an inner mount after it, has its
// outer charge given back by Finish (stacked mounts: a limited request
// charges no mount); that refund gives nothing back to the new usage:
// every Decision and Peek is the reference store's, and the new usage
// counts exactly the requests charged after the Reset.
func resetThenLaterMountRefund(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	clock := limittest.NewClock(epoch)
	key := func(r limit.Request) (string, error) {
		if v := r.Header.Values("X-Key"); len(v) > 0 {
			return v[0], nil
		}
		return "", nil
	}
	outer := limit.Policy{Name: "reset-outer", Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour, KeyFunc: key}
	inner := limit.Policy{Name: "reset-inner", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour, KeyFunc: key}
	opts := []limit.Option{limit.WithKeyPrefix("conformance")}
	s := newStore(t, clock.Now)
	resetter(t, s)
	ref := limittest.NewStore(clock.Now)
	mounts := func(st limitstore.Store) [2]*limit.Limiter {
		return [2]*limit.Limiter{limittest.MustNew(st, outer, opts...), limittest.MustNew(st, inner, opts...)}
	}
	got, want := mounts(s), mounts(ref)
	// request is one request through both mounts of ls, the inner one only
	// when asked; it returns the outer Decision (the ticket Finish takes)
	// and the inner one.
	request := func(ls [2]*limit.Limiter, throughInner bool) (*http.Request, limit.Decision, limit.Decision) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Key", "k")
		rec := httptest.NewRecorder()
		d := ls[0].CheckHTTP(rec, r, limit.Request{})
		var di limit.Decision
		if throughInner {
			di = ls[1].CheckHTTP(rec, r, limit.Request{})
		}
		return r, d, di
	}
	same := func(what string, dg, dw limit.Decision) {
		t.Helper()
		if !sameDecision(dg, dw) {
			t.Fatalf("%s at %v:\n got %+v\nwant %+v", what, clock.Now().UnixMilli(), dg, dw)
		}
	}
	peek := func(what string) limit.Decision {
		t.Helper()
		dg, dw, eg, ew := peekBoth(ctx, got[0], want[0], "k")
		if eg != nil || ew != nil {
			t.Fatalf("%s: %v / reference %v", what, eg, ew)
		}
		same(what, dg, dw)
		return dg
	}
	// The inner quota spent, by a request admitted by both.
	_, dg, dgi := request(got, true)
	_, dw, dwi := request(want, true)
	same("the first request's outer Decision", dg, dw)
	same("the first request's inner Decision", dgi, dwi)
	// A request charged by the outer mount, its inner mount not reached
	// before the Reset.
	rg, heldG, _ := request(got, false)
	rw, heldW, _ := request(want, false)
	same("the request in flight", heldG, heldW)
	if err := got[0].Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := want[0].Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_, ag, _ := request(got, false)
	_, aw, _ := request(want, false)
	same("a request after the Reset", ag, aw)
	counted := peek("a Peek after the Reset's charge")
	// The request in flight meets the inner mount now: limited, which
	// flags it, and its outer charge (taken before the Reset) is given
	// back by Finish: nothing comes back to the new usage.
	rec := httptest.NewRecorder()
	if d := got[1].CheckHTTP(rec, rg, limit.Request{}); d.Allowed {
		t.Fatalf("the inner mount admitted the request in flight: %+v", d)
	}
	want[1].CheckHTTP(httptest.NewRecorder(), rw, limit.Request{})
	got[0].Finish(ctx, &heldG, http.StatusTooManyRequests)
	want[0].Finish(ctx, &heldW, http.StatusTooManyRequests)
	if after := peek("a Peek after the later mount's refund"); after.Remaining != counted.Remaining {
		t.Fatalf("Remaining %d after the refund of a charge taken before the Reset, want %d (only the charge after it counted)", after.Remaining, counted.Remaining)
	}
}
