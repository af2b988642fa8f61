package limit

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// Property over the boundary of the accepted TokenBucket range (Limit up to
// 2^50, Burst*Window up to 2^50, refill up to maxRefill): every number Apply
// returns is in range, every intermediate stays below 2^53 (so the Lua
// transcription is exact), and admission agrees with an arbitrary-precision
// computation of the bucket.
func TestTokenBucketBoundaryOfTheAcceptedRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 13))
	refillMS := maxRefill.Milliseconds()
	limits := []int64{1, 3, 7, 1000, 1 << 20, 1 << 40, 1 << 50}
	for trial := range 2000 {
		lim := limits[rng.IntN(len(limits))]
		w := 1 + rng.Int64N(maxWindow.Milliseconds())
		if rng.IntN(2) == 0 {
			w = []int64{1, 1000, 60_000, maxWindow.Milliseconds()}[rng.IntN(4)]
		}
		// The largest Burst both bounds accept, or a little under it.
		maxBurst := min(maxTokenBucketUnits/w, new(big.Int).Div(new(big.Int).Mul(big.NewInt(refillMS), big.NewInt(lim)), big.NewInt(w)).Int64())
		if maxBurst < 1 {
			continue
		}
		burst := max(maxBurst-rng.Int64N(3), 1)
		if checkTokenBucket(lim, w, burst) != nil {
			t.Fatalf("trial %d: Limit %d Window %d Burst %d (the bound itself) rejected: %v", trial, lim, w, burst, checkTokenBucket(lim, w, burst))
		}
		if checkTokenBucket(lim, w, maxBurst+1) == nil {
			t.Fatalf("trial %d: Limit %d Window %d Burst %d (past the bound) accepted", trial, lim, w, maxBurst+1)
		}
		q := limitstore.Quota{Algorithm: TokenBucket, Limit: lim, WindowMS: w, Burst: burst}
		now := int64(1_767_225_600_000)
		var st limitstore.State
		for range 50 {
			now += rng.Int64N(ceilDiv(burst*w, lim)+2) - rng.Int64N(ceilDiv(burst*w, lim)/4+2)
			cost := []int64{0, 1, burst, burst + 1, rng.Int64N(burst + 2)}[rng.IntN(5)]
			// The arbitrary-precision bucket: TAT - now in 1/Limit ms.
			off := new(big.Int).Add(new(big.Int).Mul(big.NewInt(st.TAT-now), big.NewInt(lim)), big.NewInt(st.TATFrac))
			tau := new(big.Int).Mul(big.NewInt(burst), big.NewInt(w))
			if off.Sign() < 0 || st.TAT < now {
				off.SetInt64(0)
			}
			if off.Cmp(tau) > 0 {
				off.Set(tau)
			}
			need := new(big.Int).Add(off, new(big.Int).Mul(big.NewInt(cost), big.NewInt(w)))
			if need.Cmp(big.NewInt(1<<53)) >= 0 || new(big.Int).Add(tau, big.NewInt(2*lim)).Cmp(big.NewInt(1<<53)) >= 0 {
				t.Fatalf("trial %d: an intermediate reaches 2^53 (Limit %d Window %d Burst %d cost %d)", trial, lim, w, burst, cost)
			}
			wantAllowed := cost <= burst && need.Cmp(tau) <= 0
			next, res := applyOne(&limitstore.Op{Cost: cost, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}, st, now)
			if res.Allowed != wantAllowed {
				t.Fatalf("trial %d: Allowed %v, exact bucket says %v (Limit %d Window %d Burst %d cost %d state %+v now %d)",
					trial, res.Allowed, wantAllowed, lim, w, burst, cost, st, now)
			}
			for name, v := range map[string]int64{"ResetAfterMS": res.ResetAfterMS, "RetryAfterMS": res.RetryAfterMS, "TTLMS": res.TTLMS} {
				if v < 0 || v > refillMS {
					t.Fatalf("trial %d: %s %d out of [0, %d] (Limit %d Window %d Burst %d cost %d)", trial, name, v, refillMS, lim, w, burst, cost)
				}
			}
			if res.Remaining < 0 || res.Remaining > burst || next.TATFrac < 0 || next.TATFrac >= lim {
				t.Fatalf("trial %d: Remaining %d, state %+v (Burst %d)", trial, res.Remaining, next, burst)
			}
			st = next
		}
	}
}
