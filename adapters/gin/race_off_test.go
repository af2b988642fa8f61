//go:build !race

package ginlimit_test

// raceSlack is the extra allocation the race detector's instrumentation
// costs per request (sync.Pool drops items at random under -race).
const raceSlack = 0
