//go:build !race

package limit

// idRaceEnabled reports whether the race detector is on: its instrumentation
// changes escape analysis, so some allocation counts differ.
const idRaceEnabled = false
