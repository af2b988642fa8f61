//go:build race

package memstore_test

// raceEnabled reports a -race build, whose shadow memory counts in the RSS.
const raceEnabled = true
