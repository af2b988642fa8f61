// Package bench measures quotagate's chi middleware side by side with peer
// limiters in one `go test -bench` run: same router, same handler, same
// client addresses. It is a separate module so that the peers never enter the
// product's dependency graph. Run: make bench (or go test -bench . here).
package bench
