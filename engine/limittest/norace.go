//go:build !race

package limittest

// RaceEnabled reports whether the race detector is on. Under it sync.Pool
// drops items at random (the engine's scratch pool, the frameworks' context
// pools) and the instrumentation changes escape analysis, so allocation
// guards skip (loudly, with SkipAllocsUnderRace) instead of counting.
const RaceEnabled = false
