package limittest

// Skipper is the part of testing.TB that SkipAllocsUnderRace uses.
type Skipper interface {
	Helper()
	Skip(args ...any)
}

// SkipAllocsUnderRace skips an allocation guard under the race detector,
// saying why: there sync.Pool drops a quarter of its Puts at random, so any
// path that goes through a pool (the engine's per-call scratch, a
// framework's context pool) allocates at random, and the detector's
// instrumentation moves values to the heap. Every allocation guard calls it
// first; `go test -run Alloc` without -race runs the guards.
func SkipAllocsUnderRace(t Skipper) {
	t.Helper()
	if RaceEnabled {
		t.Skip("SKIPPED under -race: sync.Pool drops items at random there and the instrumentation changes escape analysis, so allocation counts are not deterministic; run `go test -run Alloc` without -race to check this guard")
	}
}
