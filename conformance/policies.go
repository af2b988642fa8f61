package conformance

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// planOf is the Plan function of the policy scenarios: identities starting
// with "pro-" are on plan "pro", "bad-" fail (the default plan decides,
// reported), "odd-" name a plan that does not exist (likewise); every other
// identity is on the default plan.
func planOf(r limit.Request) (string, error) {
	id, _ := r.Native.(string)
	switch {
	case strings.HasPrefix(id, "pro-"):
		return "pro", nil
	case strings.HasPrefix(id, "bad-"):
		return "", errors.New("plan lookup failed")
	case strings.HasPrefix(id, "odd-"):
		return "enterprise", nil
	}
	return "", nil
}

// multiPolicy is a policy of several quotas with a plan of its own, of
// algorithm alg (numbers chosen so that every quota limits in turn).
func multiPolicy(alg limit.Algorithm) limit.Policy {
	p := limit.Policy{Name: "multi-" + alg.String(), Algorithm: alg,
		Quotas: []limit.Rate{{Limit: 3, Window: 1500 * time.Millisecond}, {Limit: 7, Window: 7 * time.Second}, {Limit: 12, Window: 20 * time.Second}},
		Plans:  map[string][]limit.Rate{"pro": {{Limit: 6, Window: 1500 * time.Millisecond}, {Limit: 11, Window: 9 * time.Second}}},
		Plan:   planOf}
	if alg == limit.TokenBucket {
		p.Quotas[0].Burst = 4
		p.Plans["pro"][1].Burst = 3
	}
	return p
}

// policies drives policies of several quotas and plans (multiPolicy)
// through Limiter.ConsumeN on the store and, at the same instants, on the
// reference store (limittest.Store, which applies limitstore.Op.Apply to a map):
// random identities on every plan (a failing and an unknown plan
// included), random costs up to one above the smallest capacity, random
// clock steps. Every Decision must be identical, field by field, and name
// the plan the identity is on.
func policies(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := newStepClock()
			p := multiPolicy(alg)
			opts := []limit.Option{limit.WithKeyPrefix("conformance")}
			got, err := limit.New(newStore(t, clock.Now), p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			want, err := limit.New(limittest.NewStore(clock.Now), p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(alg), 15))
			ids := []string{"a", "b", "pro-a", "pro-b", "bad-a", "odd-a"}
			for step := 0; step < 1500; step++ {
				randomStep(rng, clock, 900*time.Millisecond)
				id := ids[rng.IntN(len(ids))]
				cost := 1 + rng.Int64N(4) // the smallest capacity is 3: one above it sometimes
				if rng.IntN(3) > 0 {
					cost = 1
				}
				dg, err := got.ConsumeN(ctx, id, cost)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				dw, _ := want.ConsumeN(ctx, id, cost)
				if !sameDecision(dg, dw) {
					t.Fatalf("step %d, %s cost %d at %v:\n got %+v\nwant %+v", step, id, cost, clock.Now().UnixMilli(), dg, dw)
				}
				wantPlan := ""
				if strings.HasPrefix(id, "pro-") {
					wantPlan = "pro"
				}
				if dg.Plan != wantPlan {
					t.Fatalf("step %d, %s: plan %q, want %q", step, id, dg.Plan, wantPlan)
				}
			}
		})
	}
}

// sameDecision reports whether a and b agree on every exported field but
// Policy (each Limiter's own). Unexported fields hold each Limiter's ticket
// for Finish (limiter and plan pointers) and are not part of a decision.
func sameDecision(a, b limit.Decision) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if !f.IsExported() || f.Name == "Policy" {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return false
		}
	}
	return true
}
