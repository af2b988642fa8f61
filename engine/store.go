package limit

import "context"

// Store keeps rate-limit state and makes one atomic decision per call.
//
// Take reads the State stored under op.Key (the zero State when absent or
// expired), applies op.Apply at the store's own clock reading, and, only when
// the result is Allowed, writes the new State with a time to live of
// Result.TTLMS, all as one atomic step. A denied request writes nothing.
//
// A non-nil error means the backend failed (unreachable, timed out, broken
// reply), never "denied"; the engine then applies the policy's FailureMode.
// Take must honour ctx's deadline and be safe for concurrent use. It must not
// keep op or op.Key after it returns.
type Store interface {
	Take(ctx context.Context, op *Op) (Result, error)
}

// InProcessStore is implemented by stores whose Take never waits on I/O, such
// as the memory store. The engine calls them without arming the store timeout
// (which would cost a timer per decision).
type InProcessStore interface {
	Store
	// InProcess is a marker; its result is ignored.
	InProcess()
}

// NamedStore is implemented by stores that name themselves for metrics
// (the store label of quotagate_store_duration_seconds), e.g. "memory", "redis".
type NamedStore interface {
	Store
	StoreName() string
}
