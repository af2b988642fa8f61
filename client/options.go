package limitclient

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Defaults of the options.
const (
	// DefaultMaxWait is the longest a request waits, before it is sent or
	// between two attempts, unless WithMaxWait says otherwise.
	DefaultMaxWait = 30 * time.Second
	// DefaultMaxRetries is how many times a limited request is sent again
	// unless WithMaxRetries says otherwise.
	DefaultMaxRetries = 2
	// DefaultMaxPartitions bounds the partitions whose spent quota the
	// transport remembers unless WithMaxPartitions says otherwise.
	DefaultMaxPartitions = 4096
	// DefaultBackoff is the first backoff step of a 429 response that says
	// nothing about when to come back (no Retry-After, no rate-limit field).
	DefaultBackoff = time.Second
)

type config struct {
	partition     func(*http.Request) string
	maxWait       time.Duration
	maxRetries    int
	maxPartitions int
	retry503      time.Duration // 0: 503 responses are returned as they are
	now           func() time.Time
	sleep         func(context.Context, time.Duration) error
	jitter        func(n int64) int64 // uniform in [0, n)
}

// Option configures New. An invalid value makes New panic with a message
// naming the option.
type Option func(*config) error

// WithPartition keys the transport's state by fn(req) instead of the
// request's host (URL.Host, with its port; Request.Host when that is empty),
// for a server that limits by something else, such as the API key the
// request carries: a limit reached by one key then never delays another
// key's requests. fn must be safe for concurrent use; it should return a
// string it already holds (a header value, a constant) so that it allocates
// nothing. The empty string is a partition like any other (every request
// fn gives no key shares it). A panic in fn is recovered and the request
// uses its host's partition. The partition key is never written into an error or a log line.
// nil keeps the default.
func WithPartition(fn func(req *http.Request) string) Option {
	return func(c *config) error {
		c.partition = fn
		return nil
	}
}

// WithMaxWait sets the longest a request waits, before it is sent or before
// it is sent again (default DefaultMaxWait); it must be positive. A wait the
// server asks for that is longer is not started: before sending, the request
// is sent at once (and the server's answer returned); on a 429, the response
// is returned to the caller.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithMaxWait: %v, want a positive duration", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithMaxRetries sets how many times a request answered 429 (or 503, with
// WithRetry503) is sent again (default DefaultMaxRetries); 0 turns retries
// off, leaving only the wait before sending. It must not be negative.
func WithMaxRetries(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("WithMaxRetries: %d, want 0 or more", n)
		}
		c.maxRetries = n
		return nil
	}
}

// WithMaxPartitions bounds the number of partitions whose spent quota the
// transport remembers (default DefaultMaxPartitions); it must be positive.
// When the bound is reached, partitions whose wait is over are forgotten; if
// none is, a new partition's wait is not remembered (its next request is
// sent without waiting and the server answers).
func WithMaxPartitions(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxPartitions: %d, want a positive number", n)
		}
		c.maxPartitions = n
		return nil
	}
}

// WithRetry503 retries requests answered 503 Service Unavailable, with
// jittered exponential backoff: before attempt n+1 the request waits a
// uniformly random time between half and all of base * 2^n (capped at the
// MaxWait), and never less than the response's Retry-After. base must be
// positive. Without this option a 503 is returned as it is.
func WithRetry503(base time.Duration) Option {
	return func(c *config) error {
		if base <= 0 {
			return fmt.Errorf("WithRetry503: %v, want a positive duration", base)
		}
		c.retry503 = base
		return nil
	}
}

// WithClock replaces the clock and the wait of the transport, for tests: now
// reads the time (default time.Now), sleep waits d or until ctx is done and
// then returns ctx.Err() (default: a timer). A fake sleep that advances a fake
// now makes every wait instant and exact. Both must be safe for concurrent
// use; nil keeps a default.
func WithClock(now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *config) error {
		if now != nil {
			c.now = now
		}
		if sleep != nil {
			c.sleep = sleep
		}
		return nil
	}
}

// sleepTimer is the default sleep: d on a timer, or until ctx is done.
func sleepTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
