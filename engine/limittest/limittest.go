// Package limittest holds helpers for testing quotagate adapters and stores
// over real sockets: HTTP clients that dial from a chosen loopback address (so
// that the server sees distinct socket peers), and a settable fake clock.
// It imports only the standard library.
package limittest

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// ClientFrom returns an HTTP client whose connections originate from ip, a
// loopback address such as "127.0.0.2" (all of 127.0.0.0/8 is local on
// Linux), so that a server on 127.0.0.1 sees ip as the socket peer. Redirects
// are not followed. Close its idle connections with CloseIdleConnections.
func ClientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16},
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Clock is a fake clock for stores (memstore.WithClock(c.Now)). The zero value
// reads the Unix epoch; it is safe for concurrent use.
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
