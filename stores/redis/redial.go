package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ReconnectInterval is the least time between two connection attempts to a
// Redis address whose last connection did not answer: at most one new
// connection per second per address while Redis is hung or down.
const ReconnectInterval = time.Second

// ErrReconnectBackoff means no connection was attempted: the last one to
// that address got no answer less than ReconnectInterval ago, or another
// attempt is still waiting for its first answer. The call fails at once and
// the engine applies the policy's FailureMode.
var ErrReconnectBackoff = errors.New("redisstore: not reconnecting yet")

// dialFunc is rueidis' ClientOption.DialCtxFn.
type dialFunc func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error)

// dialGate wraps a dial function so that a server which accepts connections
// but never answers (a frozen process, a dead host behind a proxy) costs at
// most one new connection per ReconnectInterval instead of one per request.
//
// rueidis redials a broken connection on the next call, bounded by that
// call's context, so against a hung server every request (every 100 ms
// store timeout, on each pipelined connection) opened a connection whose
// handshake then timed out. The gate counts a connection as answered when
// its first byte arrives. Per address:
//
//   - at most one connection is unanswered at a time: while it waits, other
//     dials wait for it (bounded by their context) when the address was
//     answering, and fail at once with ErrReconnectBackoff when it was not;
//   - a connection closed before it answered, or a failed dial, makes the
//     address unanswering: the next attempt starts no sooner than
//     ReconnectInterval after the failed one started, and dials before that
//     fail at once with ErrReconnectBackoff;
//   - the first answer makes it answering again: dials go through freely.
//
// It is safe for concurrent use.
type dialGate struct {
	inner    dialFunc
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	addrs map[string]*addrState
}

// addrState is the gate's view of one address.
type addrState struct {
	failing bool          // the last attempt got no answer
	next    time.Time     // when failing: no attempt before this
	probe   chan struct{} // non-nil while a connection waits for its first answer; closed when it ends
}

func newDialGate(inner dialFunc) *dialGate {
	if inner == nil {
		inner = plainDial
	}
	return &dialGate{inner: inner, interval: ReconnectInterval, now: time.Now, addrs: map[string]*addrState{}}
}

// plainDial is what rueidis does without a DialCtxFn.
func plainDial(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if cfg != nil {
		td := tls.Dialer{NetDialer: d, Config: cfg}
		return td.DialContext(ctx, "tcp", dst)
	}
	return d.DialContext(ctx, "tcp", dst)
}

// dial is the DialCtxFn.
func (g *dialGate) dial(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	start, err := g.admit(ctx, dst)
	if err != nil {
		return nil, err
	}
	c, err := g.inner(ctx, dst, d, cfg)
	if err != nil {
		g.finish(dst, start, false)
		return nil, err
	}
	return &gatedConn{Conn: c, g: g, dst: dst, start: start}, nil
}

// admit waits until dst may be dialed and marks the attempt as its probe;
// it returns the attempt's start time.
func (g *dialGate) admit(ctx context.Context, dst string) (time.Time, error) {
	g.mu.Lock()
	for {
		st := g.addrs[dst]
		if st == nil {
			st = &addrState{}
			g.addrs[dst] = st
		}
		now := g.now()
		if st.failing && now.Before(st.next) {
			wait := st.next.Sub(now)
			g.mu.Unlock()
			return time.Time{}, fmt.Errorf("%w: %s did not answer the last connection attempt; next attempt in %v",
				ErrReconnectBackoff, dst, wait.Round(time.Millisecond))
		}
		if st.probe == nil {
			st.probe = make(chan struct{})
			g.mu.Unlock()
			return now, nil
		}
		if st.failing {
			g.mu.Unlock()
			return time.Time{}, fmt.Errorf("%w: a connection attempt to %s is waiting for its first answer", ErrReconnectBackoff, dst)
		}
		probe := st.probe
		g.mu.Unlock()
		select {
		case <-probe:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
		g.mu.Lock()
	}
}

// finish ends the probe of dst that started at start: answered or not.
func (g *dialGate) finish(dst string, start time.Time, answered bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.addrs[dst]
	if st.probe != nil {
		close(st.probe)
		st.probe = nil
	}
	st.failing = !answered
	if !answered {
		st.next = start.Add(g.interval)
	}
}

// gatedConn reports its first answer, or its close without one, to the gate.
type gatedConn struct {
	net.Conn
	g     *dialGate
	dst   string
	start time.Time
	done  atomic.Bool // the gate has been told
}

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.done.Load() && c.done.CompareAndSwap(false, true) {
		c.g.finish(c.dst, c.start, true)
	}
	return n, err
}

func (c *gatedConn) Close() error {
	if c.done.CompareAndSwap(false, true) {
		c.g.finish(c.dst, c.start, false)
	}
	return c.Conn.Close()
}
