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
// keep op or op.Key after it returns. It may describe itself to the engine
// by implementing Describer.
type Store interface {
	Take(ctx context.Context, op *Op) (Result, error)
}
