package guard

// SilenceGrace is how long a silent store is confirmed before its calls
// fail: a call to a store that answers nothing fails at the timeout + the
// 1 ms tick + SilenceGrace.
const SilenceGrace = silenceGrace

// WithoutWatch makes a Store that never watches its callers' cancellation:
// the path before callers were released, for the benchmarks beside it.
func WithoutWatch() Option {
	return func(s *Store) error {
		s.unwatched = true
		return nil
	}
}
