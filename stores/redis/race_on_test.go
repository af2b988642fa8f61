//go:build race

package redisstore

// raceEnabled: the race detector changes allocation counts.
const raceEnabled = true
