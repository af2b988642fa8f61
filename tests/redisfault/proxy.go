package redisfault

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of one address. It
// forwards what clients send at once and holds every chunk of what the
// target answers for the current reply delay before passing it on (each
// chunk is delayed by the delay in force when it arrived, measured from its
// arrival: pipelined replies are not delayed one after another). It counts
// the connections it accepts, which are the new connections a client under
// test opened. Its methods are safe for concurrent use.
type Proxy struct {
	t        testing.TB
	ln       net.Listener
	target   atomic.Pointer[string]
	delay    atomic.Int64 // ns
	accepted atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards every connection
// to target. It is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redisfault: proxy listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, conns: map[net.Conn]struct{}{}}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "redis://" + Addr().
func (p *Proxy) URL() string { return "redis://" + p.Addr() }

// SetTarget sends the connections accepted from now on to target; the
// connections open keep theirs (an address repointed to a new primary,
// as DNS or a cloud provider's endpoint does after a failover).
func (p *Proxy) SetTarget(target string) { p.target.Store(&target) }

// SetDelay sets how long each reply chunk that arrives from now on is held
// (0: none).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Delay returns the current reply delay.
func (p *Proxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Accepted returns how many client connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// DropConns closes every open connection through the proxy (both sides),
// as a network failure would; new connections are still accepted.
func (p *Proxy) DropConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops accepting, drops every connection and waits for the proxy's
// goroutines. Idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c so that Close and DropConns reach it; false when the
// proxy is closed (c is closed then).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve pipes one client connection to a fresh connection to the target.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", *p.target.Load(), 5*time.Second)
	if err != nil {
		return // the client sees the connection close
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { // client -> server, undelayed
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if _, werr := server.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { p.replies(server, client); done <- struct{}{} }()
	<-done // either side ended: close both (deferred), then wait for the other
	client.Close()
	server.Close()
	<-done
}

// chunk is one read from the target with the time it may be passed on.
type chunk struct {
	b   []byte
	due time.Time
}

// replies copies server -> client, holding each chunk until its due time.
func (p *Proxy) replies(server, client net.Conn) {
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(p.Delay())}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d) // the fault being simulated
		}
		if _, err := client.Write(c.b); err != nil {
			server.Close() // unblocks the reader, which closes ch
			for range ch {
			}
			return
		}
	}
}
