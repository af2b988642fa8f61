package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
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
// An attempt is judged by the server's behaviour only, never by the
// caller's patience: a caller whose context ends first (a 1 ms deadline, a
// cancelled request) stops waiting, but its attempt goes on in the
// background until the dial timeout (Dialer.Timeout; rueidis' 5 s when
// unset): the dial runs under its own deadline, and a connection whose
// handshake the caller's context cut short is not closed but kept waiting
// for the server's first byte (after a PING of the gate's own when nothing
// was written yet). An answer makes the address answering; silence until
// the dial timeout, a refused or reset connection make it unanswering, as
// above. So a healthy server is never refused because its callers were in
// a hurry, and a hung one still costs one connection per attempt. The dial
// does not see the caller's context values (it may outlive the call).
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
	a := &attempt{g: g, dst: dst, start: start, timeout: dialTimeout(d)}
	dl := time.Now().Add(a.timeout)
	got := make(chan dialResult, 1)
	go func() { // the attempt's own deadline, not the caller's (see dialGate)
		dctx, cancel := context.WithDeadline(context.Background(), dl)
		c, err := g.inner(dctx, dst, d, cfg)
		cancel()
		got <- dialResult{c, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			g.finish(dst, start, noAnswer)
			return nil, r.err
		}
		return a.conn(r.c, ctx), nil
	case <-ctx.Done():
		go func() { // the caller is gone; the attempt goes on
			r := <-got
			if r.err != nil {
				g.finish(dst, start, noAnswer)
				return
			}
			a.conn(r.c, nil).confirm()
		}()
		return nil, ctx.Err()
	}
}

type dialResult struct {
	c   net.Conn
	err error
}

// dialTimeout is how long rueidis lets one connection attempt take (the
// dial, then the handshake): d.Timeout, or rueidis' default.
func dialTimeout(d *net.Dialer) time.Duration {
	if d != nil && d.Timeout > 0 {
		return d.Timeout
	}
	return rueidis.DefaultDialTimeout
}

// admit waits until dst may be dialed and marks the attempt as its probe;
// it returns the attempt's start time. A caller whose context is over
// already makes no attempt.
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
			if err := ctx.Err(); err != nil {
				g.mu.Unlock()
				return time.Time{}, err
			}
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

// What an attempt learnt about its address.
const (
	noAnswer   = iota // no answer: the address backs off
	anAnswer          // the server answered
	noEvidence        // nothing either way: the address keeps its state
)

// finish ends the probe of dst that started at start with its outcome.
func (g *dialGate) finish(dst string, start time.Time, outcome int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.addrs[dst]
	if st.probe != nil {
		close(st.probe)
		st.probe = nil
	}
	switch outcome {
	case anAnswer:
		st.failing = false
	case noAnswer:
		st.failing, st.next = true, start.Add(g.interval)
	}
}

// attempt is one connection attempt to dst, started at start (the gate's
// clock) and given timeout (the dial timeout) to be answered.
type attempt struct {
	g       *dialGate
	dst     string
	start   time.Time
	timeout time.Duration
}

// conn wraps the attempt's connection; ctx is the dialing caller's (nil:
// none is waiting).
func (a *attempt) conn(c net.Conn, ctx context.Context) *gatedConn {
	gc := &gatedConn{Conn: c, a: a, until: time.Now().Add(a.timeout)}
	if ctx != nil {
		// Kept, not ctx itself: the handshake runs while the caller waits,
		// but a pooled context may be reused once the call returned.
		gc.callerDone = ctx.Done()
		gc.callerDL, _ = ctx.Deadline()
	}
	return gc
}

// pingCmd is what confirm sends on a connection nothing was written to yet
// (any reply, an error included, is an answer).
const pingCmd = "*1\r\n$4\r\nPING\r\n"

// gatedConn reports its first answer, or its close without one, to the gate.
type gatedConn struct {
	net.Conn
	a     *attempt
	until time.Time // the attempt's deadline for an answer (real clock)
	// The dialing caller's context, while its handshake runs.
	callerDone <-chan struct{}
	callerDL   time.Time

	state  atomic.Int32 // connOpen, connTold, connConfirming
	heard  atomic.Bool  // a byte has arrived
	wrote  atomic.Int32 // wroteNothing, wroteWhole, wroteCut
	broken atomic.Bool  // a read or write failed, not by a deadline
}

const (
	connOpen       = iota // unanswered, the gate not told
	connTold              // the gate has been told
	connConfirming        // closed by its caller unanswered: confirm waits for the server
)

const (
	wroteNothing = iota
	wroteWhole   // every write went out whole
	wroteCut     // a write was cut short: the stream ends mid-command
)

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
		if c.state.CompareAndSwap(connOpen, connTold) {
			c.a.g.finish(c.a.dst, c.a.start, anAnswer)
		}
	}
	if err != nil && n == 0 && !isTimeout(err) {
		c.broken.Store(true)
	}
	return n, err
}

func (c *gatedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	switch {
	case err == nil:
		c.wrote.CompareAndSwap(wroteNothing, wroteWhole)
	case n > 0:
		c.wrote.Store(wroteCut)
	}
	if err != nil && !isTimeout(err) {
		c.broken.Store(true)
	}
	return n, err
}

// Close closes the connection; one closed before it answered is a failed
// attempt, unless the caller's context cut its handshake short: then it
// stays open for confirm.
func (c *gatedConn) Close() error {
	next := int32(connTold)
	if c.cutByCaller() {
		next = connConfirming
	}
	if c.state.CompareAndSwap(connOpen, next) {
		if next == connConfirming {
			go c.confirm()
			return nil
		}
		c.a.g.finish(c.a.dst, c.a.start, noAnswer)
	} else if c.state.Load() == connConfirming {
		return nil // confirm closes it
	}
	return c.Conn.Close()
}

// cutByCaller reports whether the handshake ended because the dialing
// caller's context did (done, or its deadline, which rueidis puts on the
// connection, passed) before the attempt's own deadline, with no sign from
// the server (a reset or end of stream is one).
func (c *gatedConn) cutByCaller() bool {
	now := time.Now()
	if c.broken.Load() || !now.Before(c.until) {
		return false
	}
	select {
	case <-c.callerDone: // nil: never
		return true
	default:
	}
	return !c.callerDL.IsZero() && !now.Before(c.callerDL)
}

// confirm finishes an attempt its caller gave up on: it waits until the
// attempt's deadline for the server's first byte (sending PING first when
// nothing was written; when a write was cut mid-command no reply can be
// expected, and the attempt tells nothing), then closes the connection and
// tells the gate.
func (c *gatedConn) confirm() {
	outcome := noAnswer
	switch {
	case c.wrote.Load() == wroteCut:
		outcome = noEvidence
	case c.heard.Load():
		outcome = anAnswer
	case c.Conn.SetDeadline(c.until) == nil:
		if c.wrote.Load() == wroteNothing {
			if _, err := io.WriteString(c.Conn, pingCmd); err != nil {
				break
			}
		}
		var b [1]byte
		if n, _ := c.Conn.Read(b[:]); n > 0 || c.heard.Load() {
			outcome = anAnswer
		}
	}
	c.Conn.Close()
	c.a.g.finish(c.a.dst, c.a.start, outcome)
}

// isTimeout reports whether err is a deadline's (the connection's, which
// rueidis sets from the caller's context).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
