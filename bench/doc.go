// Package bench measures quotagate side by side with peer limiters: its chi
// middleware against the chi peers in one `go test -bench` run (same router,
// same handler, same client addresses), and, in the redispeers command, its
// Redis store against the Redis peers. It is a separate module so
// that the peers never enter the product's dependency graph. Run: make bench
// (or go test -bench . and go run ./redispeers here).
package bench
