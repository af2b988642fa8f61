package limittest

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// BoundaryPolicies returns policies on the boundary of the range limit.New
// accepts, and random ones inside it, for property tests of the numbers a
// policy produces (every delay, header value and time to live in range).
// For each algorithm and windows from 1 ms to 366 days it finds by bisection the
// largest Limit New accepts (and, for a TokenBucket, the largest Burst for
// several rates), checks that one more is refused with an error naming the
// field, and returns the largest, a random smaller one and (window
// algorithms) the largest with AlignWindows. The policies have Names, so
// that Limiters of equal numbers may be built on one store.
func BoundaryPolicies(t TB, rng *rand.Rand) []limit.Policy {
	t.Helper()
	var ps []limit.Policy
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 999 * time.Millisecond, time.Second,
		time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 366 * 24 * time.Hour}
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		for _, w := range windows {
			if alg != limit.TokenBucket {
				top := largest(t, limit.Policy{Algorithm: alg, Window: w}, "Limit")
				ps = append(ps, limit.Policy{Algorithm: alg, Window: w, Limit: top},
					limit.Policy{Algorithm: alg, Window: w, Limit: 1 + rng.Int64N(top)},
					limit.Policy{Algorithm: alg, Window: w, Limit: top, AlignWindows: true})
				continue
			}
			for _, lim := range []int64{1, 3, 1000, largest(t, limit.Policy{Algorithm: alg, Window: w, Burst: 1}, "Limit")} {
				if accepts(limit.Policy{Algorithm: alg, Window: w, Limit: lim, Burst: 1}) != nil {
					continue // a rate the engine does not take at all
				}
				top := largest(t, limit.Policy{Algorithm: alg, Window: w, Limit: lim}, "Burst")
				ps = append(ps, limit.Policy{Algorithm: alg, Window: w, Limit: lim, Burst: top},
					limit.Policy{Algorithm: alg, Window: w, Limit: lim, Burst: 1 + rng.Int64N(top)})
			}
		}
	}
	for i := range ps {
		ps[i].Name = "bounds"
	}
	return ps
}

// MaxDelayMS is the longest delay (ResetAfter, RetryAfter) and time to live
// a store may report for p, in ms: FixedWindow a window plus the TTL's 1 s
// of grace, SlidingWindow two windows, TokenBucket the time to refill Burst
// (rounded up).
func MaxDelayMS(p limit.Policy) int64 {
	w := p.Window.Milliseconds()
	switch p.Algorithm {
	case limit.FixedWindow:
		return w + 1000
	case limit.TokenBucket:
		return (p.Burst*w + p.Limit - 1) / p.Limit
	}
	return 2 * w
}

// accepts reports New's error for p on a fresh reference store.
func accepts(p limit.Policy) error {
	p.Name = "bounds"
	_, err := limit.New(NewStore(nil), p)
	return err
}

// largest returns the largest value of field ("Limit" or "Burst") New
// accepts with the rest of p, and fails t unless the next one is refused
// with an error naming the field.
func largest(t TB, p limit.Policy, field string) int64 {
	t.Helper()
	with := func(v int64) error {
		q := p
		if field == "Limit" {
			q.Limit = v
		} else {
			q.Burst = v
		}
		return accepts(q)
	}
	if err := with(1); err != nil {
		t.Fatalf("%+v with %s 1: %v", p, field, err)
	}
	lo, hi := int64(1), int64(1)<<62 // with(lo) accepts, with(hi) does not
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; with(mid) == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	if err := with(lo + 1); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), field) {
		t.Fatalf("%+v with %s %d (one above the largest accepted): %v, want an error naming %s", p, field, lo+1, err, field)
	}
	return lo
}
