package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// Client defaults that ParseURL applies when the URL does not set them.
const (
	// DefaultDialTimeout bounds one connection attempt (URL: dial_timeout).
	// rueidis' own default is 5 s; a limiter would rather fail over to its
	// FailureMode sooner.
	DefaultDialTimeout = time.Second
	// DefaultConnWriteTimeout is how long a connection may go without an
	// answer before rueidis declares it dead and redials (URL:
	// write_timeout). Each decision is bounded by the Store's own timeout
	// anyway (WithTimeout, 100 ms by default; under WithoutGuard, the
	// caller's guard's); this bounds how long the calls that timed out keep
	// waiting on a hung server in the background. rueidis' default is 10 s.
	DefaultConnWriteTimeout = time.Second
	// DefaultSentinelRefresh is how often a Sentinel client asks the
	// sentinels for the primary's address besides following their
	// +switch-master events (rueidis' SentinelOption.TopologyRefreshInterval,
	// off by default there).
	DefaultSentinelRefresh = 5 * time.Second
)

// Reconnect backoff of a Store that could not reach Redis at construction.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// ParseURL returns the rueidis.ClientOption for a Redis URL, with the
// defaults that suit a rate limiter. It accepts what rueidis.ParseURL does:
//
//	redis://[user:password@]host:port[/db]           standalone (Cluster is detected)
//	rediss://...                                     TLS (valkey:// and valkeys:// too)
//	redis://host:port?addr=host2:port&addr=host3:port Cluster seed nodes
//	redis://s1:26379?addr=s2:26379&master_set=name    Sentinel: the hosts are sentinels
//	unix:///path/to/redis.sock
//
// with the query parameters addr (repeatable), db, dial_timeout and
// write_timeout (Go durations, > 0), client_name, protocol (2 or 3),
// master_set, max_retries (only 0: no retries), client_cache (only 0: the
// Store never caches) and skip_verify (rediss only). Unlike rueidis it
// rejects, wrapped in ErrInvalidOption with the valid choices named, an
// unknown scheme, an unknown or repeated parameter, a value that would
// be ignored or contradicts the Store, a port outside 1-65535 and an addr
// without its host or port (rueidis would dial the URL's own host in its
// place). On top of rueidis' defaults it sets:
//
//   - DisableCache: true. The Store never reads through client-side caching;
//     without it rueidis would still ask every connection for CLIENT TRACKING
//     (RESP3), which servers without tracking refuse.
//   - AlwaysPipelining: true. Every call goes through the connection's
//     pipeline, so a call whose deadline expires is abandoned without closing
//     the shared connection (otherwise a lone caller's timeout closes it and
//     the next callers pay a reconnect: a storm under a slow server).
//     Auto-pipelining of concurrent calls stays on (never set
//     DisableAutoPipelining for a limiter: each decision would take a pooled
//     connection of its own).
//   - Dialer.Timeout DefaultDialTimeout and ConnWriteTimeout
//     DefaultConnWriteTimeout, unless the URL sets dial_timeout/write_timeout.
//   - DialCtxFn: a reconnect backoff around the dial (the URL's own dialer
//     for unix://). An address whose last connection got no answer is not
//     dialed again for ReconnectInterval (1 s); calls in between fail at once
//     with ErrReconnectBackoff. A hung server (SIGSTOP: it accepts, never
//     answers) then costs one new connection per second per process instead
//     of one per store timeout per pipelined connection (measured: 46 in a
//     5 s freeze at 200 requests/s without it, 4 with it). A connection
//     attempt whose caller gives up first (a 1 ms deadline) is not a failure:
//     it goes on in the background until the dial timeout, and only the
//     server's silence makes the address back off. Replacing
//     DialCtxFn (WithClientOption) removes the backoff; with it,
//     DisableTCPNoDelay has no effect.
//   - Sentinel (master_set): the sentinels are dialed with the same Dialer
//     (timeouts) and TLS configuration as the data nodes (rueidis would dial
//     them with zero values: no TLS under rediss://), and
//     Sentinel.TopologyRefreshInterval is DefaultSentinelRefresh, so a missed
//     +switch-master event cannot pin the client to a demoted primary. The
//     URL's user and password are the data nodes'; sentinels that require
//     AUTH need Sentinel.Username/Password through WithClientOption.
func ParseURL(url string) (rueidis.ClientOption, error) {
	if strings.TrimSpace(url) == "" {
		return rueidis.ClientOption{}, fmt.Errorf("%w: Redis URL is empty", ErrInvalidOption)
	}
	if err := checkURL(url); err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("%w: Redis URL: %w", ErrInvalidOption, err)
	}
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("%w: Redis URL: %w", ErrInvalidOption, err)
	}
	opt.DisableCache = true
	opt.AlwaysPipelining = true
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = DefaultDialTimeout
	}
	if opt.ConnWriteTimeout == 0 {
		opt.ConnWriteTimeout = DefaultConnWriteTimeout
	}
	opt.DialCtxFn = newDialGate(opt.DialCtxFn).dial
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Dialer = opt.Dialer
		if opt.TLSConfig != nil {
			opt.Sentinel.TLSConfig = opt.TLSConfig.Clone()
		}
		opt.Sentinel.TopologyRefreshInterval = DefaultSentinelRefresh
	}
	return opt, nil
}

// NewFromURL is ParseURL then Dial: the way an application turns its -redis
// flag into a Store. Close the Store when done.
func NewFromURL(url string, opts ...Option) (*Store, error) {
	opt, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return Dial(opt, opts...)
}

// Dial creates a rueidis client from opt and returns a Store that owns it
// (Close closes it). It tries to connect once, synchronously (bounded by
// opt.Dialer.Timeout). When Redis is unreachable (connection refused or
// reset, timeout, a server still loading), Dial still returns a working
// Store and a nil error: the Store keeps connecting in the background (50 ms
// backoff doubling to 1 s) and, until it succeeds, Take fails at once with an
// error wrapping ErrNotConnected, so requests follow the policy's
// FailureMode; once connected, rueidis reconnects by itself (through
// ParseURL's reconnect backoff when opt came from ParseURL). Other failures
// (bad options, authentication refused) are returned, wrapped in
// ErrInvalidOption when they are the options' fault.
func Dial(opt rueidis.ClientOption, opts ...Option) (*Store, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.client != nil {
		cfg.client(&opt)
	}
	if len(opt.InitAddress) == 0 {
		return nil, fmt.Errorf("%w: no Redis address (ClientOption.InitAddress is empty)", ErrInvalidOption)
	}
	s := newStore(cfg)
	s.owned = true
	s.conns = &connSet{}
	opt.DialCtxFn = s.conns.wrap(opt.DialCtxFn)
	sub := opt
	s.subOpt = &sub
	c, err := rueidis.NewClient(opt)
	if err == nil {
		s.adopt(c)
		return s, nil
	}
	if !transient(err) {
		if errors.Is(err, rueidis.ErrNoAddr) || errors.Is(err, rueidis.ErrNoCache) ||
			errors.Is(err, rueidis.ErrWrongPipelineMultiplex) || errors.Is(err, rueidis.ErrNoSendToReplicas) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		return nil, prefixed(fmt.Errorf("connecting to %v: %w", opt.InitAddress, err))
	}
	s.lastErr.Store(&errRef{err})
	s.stop = make(chan struct{})
	s.stopped = make(chan struct{})
	go s.connectLoop(opt)
	return s, nil
}

// connectLoop retries rueidis.NewClient until it succeeds or Close is called.
func (s *Store) connectLoop(opt rueidis.ClientOption) {
	defer close(s.stopped)
	delay := minBackoff
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		c, err := rueidis.NewClient(opt)
		if err == nil {
			// Published before stopped is closed, so Close sees and closes it.
			s.adopt(c)
			return
		}
		s.lastErr.Store(&errRef{err})
		delay = min(2*delay, maxBackoff)
		t.Reset(delay)
	}
}

// transient reports whether a connection error means "Redis is not there
// (yet)" rather than "this configuration cannot work".
func transient(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, rueidis.ErrClosing), errors.Is(err, ErrReconnectBackoff):
		return true
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		return re.IsLoading() || re.IsClusterDown() || re.IsTryAgain() ||
			strings.HasPrefix(msg, "MASTERDOWN") || strings.HasPrefix(msg, "BUSY")
	}
	return false
}
