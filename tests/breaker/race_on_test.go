//go:build race

package breaker_test

const raceEnabled = true
