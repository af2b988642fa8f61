package limit

import "testing"

// BenchmarkApply measures Op.Apply alone on an existing state, admitted
// (a quota far from exhaustion), for one quota and for two.
func BenchmarkApply(b *testing.B) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		q := Quota{Algorithm: alg, Limit: 1 << 24, WindowMS: 1 << 24, PhaseMS: 7}
		if alg == TokenBucket {
			q.Burst, q.PhaseMS = q.Limit, 0
		}
		for _, n := range []int{1, 2} {
			b.Run(alg.String()+"/n="+string(rune('0'+n)), func(b *testing.B) {
				op := Op{Cost: 1, N: n, Quotas: [MaxQuotas]Quota{q, q}}
				var sts [MaxQuotas]State
				now := int64(1_767_225_600_000)
				b.ReportAllocs()
				for b.Loop() {
					now++
					if res := op.Apply(&sts, now); !res.Allowed {
						b.Fatal("limited")
					}
				}
			})
		}
	}
}
