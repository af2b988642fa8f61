package limitclient

// WithJitter replaces the random source of the backoff (uniform in [0, n)).
func WithJitter(fn func(n int64) int64) Option {
	return func(c *config) error {
		c.jitter = fn
		return nil
	}
}
