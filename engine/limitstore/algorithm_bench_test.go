package limitstore

import "testing"

// BenchmarkApply measures Op.Apply alone on an existing state, admitted
// (a quota far from exhaustion: 2^30 per 2^20 ms, the clock one ms further
// at each call, so no run exhausts it), for one quota and for two.
func BenchmarkApply(b *testing.B) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		q := Quota{Algorithm: alg, Limit: 1 << 30, WindowMS: 1 << 20, PhaseMS: 7}
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
