// Package limittest holds the shared test doubles of quotagate's modules: a
// reference Store (the simplest correct store), stores that fail, hang or
// answer late, a recording Observer, a settable fake Clock, and helpers for
// tests over real sockets (HTTP clients that dial from a chosen loopback
// address, so that the server sees distinct socket peers) and in process
// (Serve, and Sink for benchmarks and allocation guards).
//
// It imports only the standard library and the engine, so that adapters,
// stores and metrics can test without another quotagate module.
package limittest

import (
	"sync"
	"time"
)

// Clock is a fake clock for stores (memstore.WithClock(c.Now), NewStore(c.Now)).
// The zero value reads the Unix epoch; it is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		return time.UnixMilli(0)
	}
	return c.t
}

// Advance moves the clock by d (which may be negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set sets the clock's reading.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
