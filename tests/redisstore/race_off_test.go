//go:build !race

package redisstore_test

// raceEnabled: the race detector changes allocation counts.
const raceEnabled = false
