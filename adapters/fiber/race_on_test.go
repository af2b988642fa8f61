//go:build race

package fiberlimit_test

// raceEnabled reports whether the race detector is on: under it sync.Pool
// drops items at random, so allocation counts are not deterministic.
const raceEnabled = true
