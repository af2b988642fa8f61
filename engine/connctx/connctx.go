// Package connctx gives a request what net/http gives it and fasthttp does
// not: a context that ends when the client closes its connection.
//
// net/http reads a request's connection in the background while the
// handler runs and cancels the request's context when the client goes away.
// fasthttp (and so fiber v2 and v3) serves a connection in the handler's
// goroutine and does nothing on the socket until the handler returns:
// valyala/fasthttp#468 and #965 say it cannot, and RequestCtx.Done closes
// only when the server shuts down. A Ctx watches the socket itself, only
// while something waits on its Done: every 20 ms a peek (recv with
// MSG_PEEK|MSG_DONTWAIT, which takes nothing from the socket) tells an
// orderly close or a reset by the client from a connection that is still
// open. So a fast decision costs no system call, and a decision that waits
// on a slow store costs one every 20 ms.
//
//	ctx := connctx.New(c.UserContext(), c.Context().Conn())
//	d := l.Check(ctx, req, w) // a client that leaves releases the decision
//	ctx.End()
//
// What it cannot tell: a client that sent more bytes (a pipelined request)
// and then left is watched no further, as net/http's background read
// stops at the first byte; a connection that is not a socket (net.Pipe, a
// wrapper without SyscallConn) or a platform without MSG_PEEK (Windows,
// Plan 9) is never watched, and Done is the parent's.
package connctx

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// ErrClientGone is the cause (context.Cause) of a Ctx that ended because
// the client closed or reset its connection; Err is context.Canceled.
var ErrClientGone = errors.New("connctx: the client closed its connection")

// errEnded is the cause of a Ctx that ended by End.
var errEnded = errors.New("connctx: the request's decision is over")

// interval is how often a watched connection is peeked at.
const interval = 20 * time.Millisecond

// Ctx is a context.Context that is its parent until the client closes its
// connection or End is called, whichever comes first; then it is done with
// context.Canceled. Its Deadline and Value are the parent's. It is safe
// for concurrent use.
type Ctx struct {
	parent context.Context
	conn   net.Conn

	mu     sync.Mutex
	inner  context.Context // parent's child, made by the first Done
	cancel context.CancelCauseFunc
	rc     syscall.RawConn
	timer  *time.Timer
	ended  bool
	never  bool // the connection cannot be watched: Done is the parent's
}

// New returns a Ctx of parent for a request read from conn (the server's
// side of the client's connection; a *tls.Conn is watched through the
// connection under it). Nothing is watched until something calls Done.
func New(parent context.Context, conn net.Conn) *Ctx {
	return &Ctx{parent: parent, conn: conn}
}

// Deadline returns the parent's deadline.
func (c *Ctx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done returns a channel closed when the parent is done, the client closes
// or resets its connection, or End is called. The first call starts the
// watch.
func (c *Ctx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		if !c.never && !c.ended {
			c.rc = rawConn(c.conn)
		}
		if c.rc == nil {
			c.never = true
			return c.parent.Done()
		}
		c.inner, c.cancel = context.WithCancelCause(c.parent)
		c.timer = time.AfterFunc(interval, c.poll)
	}
	return c.inner.Done()
}

// Err returns nil while the context is not done, else context.Canceled or
// the parent's error.
func (c *Ctx) Err() error { return c.current().Err() }

// Value returns the parent's value for key.
func (c *Ctx) Value(key any) any { return c.current().Value(key) }

// End stops watching and ends the context (for a Ctx whose Done was
// called): call it when the work the context was for is over, before the
// server reads the connection again. It may be called more than once.
func (c *Ctx) End() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.inner != nil {
		c.timer.Stop()
		c.cancel(errEnded)
	}
}

// current is the context Err and Value read: the watched child once Done
// made it (so that context.AfterFunc and WithCancel of a Ctx find it and
// need no goroutine of their own), else the parent.
func (c *Ctx) current() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner != nil {
		return c.inner
	}
	return c.parent
}

// poll peeks at the connection and either ends the context (the client is
// gone), looks again after interval (the connection is open and quiet), or
// stops watching (it cannot tell any more).
func (c *Ctx) poll() {
	c.mu.Lock()
	if c.ended || c.inner.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	st := peek(c.rc)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended:
	case st == gone:
		c.cancel(ErrClientGone)
	case st == open:
		c.timer.Reset(interval)
	}
}

// rawConn returns the socket under conn, or nil.
func rawConn(conn net.Conn) syscall.RawConn {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// state is what a peek found.
type state int

const (
	open    state = iota // nothing to read, still connected
	gone                 // closed or reset by the client
	unknown              // bytes waiting, the socket closed here, or no peek on this platform
)
