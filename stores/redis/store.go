package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/redis/rueidis"
)

var (
	// ErrNotConnected means the Store has not reached Redis yet: it was
	// built by NewFromURL or Dial while Redis was unreachable and keeps
	// connecting in the background. Take returns it (wrapped, with the last
	// connection error) so that the engine applies the policy's FailureMode.
	ErrNotConnected = errors.New("redisstore: not connected to Redis yet")
	// ErrBadReply means a script answered with something other than the six
	// integers it returns; the wrapped message shows what came back.
	ErrBadReply = errors.New("redisstore: unexpected script reply")
	// ErrClosed means the Store was closed: Take and Ping fail with it.
	ErrClosed = errors.New("redisstore: store is closed")
	// ErrInvalidOption means New, Dial or NewFromURL rejected an argument;
	// the wrapped message names it.
	ErrInvalidOption = errors.New("redisstore: invalid option")
)

// Store is a limit.Store backed by Redis (standalone, Sentinel or Cluster)
// through a rueidis client. Every decision is one EVALSHA of the script for
// its algorithm (EVAL once per node when the script is not cached yet); the
// script reads the clock, reads and, when allowed, writes the state of one
// key with its time to live, atomically. A denied request writes nothing.
//
// It is safe for concurrent use; concurrent calls share connections through
// rueidis auto-pipelining. The zero value is not usable: call New, Dial or
// NewFromURL.
type Store struct {
	client atomic.Pointer[clientRef]
	clock  func() time.Time // nil: the server's TIME
	closed atomic.Bool

	// Set by Dial when the Store owns its client.
	owned     bool
	lastErr   atomic.Pointer[errRef] // the latest failed connection attempt
	stop      chan struct{}          // closed by Close
	stopped   chan struct{}          // closed when the connect loop ends
	closeOnce sync.Once
}

type clientRef struct{ c rueidis.Client }
type errRef struct{ err error }

var (
	_ limit.Store     = (*Store)(nil)
	_ limit.Describer = (*Store)(nil)
)

// Option configures New, Dial and NewFromURL.
type Option func(*config) error

type config struct {
	clock  func() time.Time
	client func(*rueidis.ClientOption)
}

// WithClock makes the Store decide at now() (read once per decision, on the
// caller's machine, sent to the script in whole Unix milliseconds) instead of
// the Redis server's TIME. Meant for deterministic tests: in production the
// server clock is what lets replicas share one allowance without
// synchronised clocks. nil is an error.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		c.clock = now
		return nil
	}
}

// WithClientOption lets Dial and NewFromURL adjust the rueidis.ClientOption
// after this package's defaults are applied (see ParseURL), e.g. to set TLS
// or a dialer. New ignores it (the caller built the client). nil is an error.
func WithClientOption(f func(*rueidis.ClientOption)) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithClientOption(nil)", ErrInvalidOption)
		}
		c.client = f
		return nil
	}
}

func buildConfig(opts []Option) (*config, error) {
	cfg := &config{}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(cfg); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// New returns a Store on client, which the caller owns: Close leaves it
// open. Any rueidis client works (standalone, Sentinel, Cluster); build it
// with DisableCache: true unless you use client-side caching elsewhere (the
// Store never reads through the cache). A nil client is an error.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{clock: cfg.clock}
	s.client.Store(&clientRef{client})
	return s, nil
}

// Describe tells the engine that Store is "redis", the store label in
// metrics, and does I/O (it is called under the store timeout).
func (s *Store) Describe() limit.StoreInfo { return limit.StoreInfo{Name: "redis"} }

// Client returns the rueidis client, or nil while a Store built by Dial or
// NewFromURL has not connected yet.
func (s *Store) Client() rueidis.Client {
	if r := s.client.Load(); r != nil {
		return r.c
	}
	return nil
}

// argsBuf is the stack buffer for one call's key and arguments; longer keys
// spill to the heap.
const argsBuf = 256

// Take implements limit.Store: one script call. The error is non-nil when
// Redis could not be asked or did not answer in time (ctx); the request may
// still have been counted when the deadline expired after the script ran.
func (s *Store) Take(ctx context.Context, op *limit.Op) (limit.Result, error) {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return limit.Result{}, s.unusable()
	}
	// The key and every argument are built into one buffer and converted to
	// one string (the only allocation of ours per call); keys and args are
	// substrings of it. A copy is needed anyway: rueidis may still write the
	// command after a deadline returned control to the caller, and op.Key is
	// reused by the engine.
	var b [argsBuf]byte
	buf := append(b[:0], op.Key...)
	var ends [6]int
	ends[0] = len(buf)
	if s.clock != nil {
		buf = strconv.AppendInt(buf, s.clock().UnixMilli(), 10)
	}
	ends[1] = len(buf)
	n := 2
	script := slidingScript
	switch op.Algorithm {
	case limit.TokenBucket:
		script = gcraScript
		buf = strconv.AppendInt(buf, op.IntervalMS, 10)
		ends[n], n = len(buf), n+1
		buf = strconv.AppendInt(buf, op.Burst, 10)
		ends[n], n = len(buf), n+1
	default:
		if op.Algorithm == limit.FixedWindow {
			script = fixedScript
		}
		buf = strconv.AppendInt(buf, op.Limit, 10)
		ends[n], n = len(buf), n+1
		buf = strconv.AppendInt(buf, op.WindowMS, 10)
		ends[n], n = len(buf), n+1
		buf = strconv.AppendInt(buf, op.PhaseMS, 10)
		ends[n], n = len(buf), n+1
	}
	buf = strconv.AppendInt(buf, op.Cost, 10)
	ends[n], n = len(buf), n+1
	str := string(buf)
	keys := [1]string{str[:ends[0]]}
	var args [5]string
	for i := 1; i < n; i++ {
		args[i-1] = str[ends[i-1]:ends[i]]
	}
	resp := script.Exec(ctx, r.c, keys[:], args[:n-1])
	return parseReply(resp)
}

// parseReply turns the script's six integers into a Result.
func parseReply(resp rueidis.RedisResult) (limit.Result, error) {
	arr, err := resp.ToArray()
	if err != nil {
		return limit.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	if len(arr) != 6 {
		return limit.Result{}, fmt.Errorf("%w: %d elements, want 6", ErrBadReply, len(arr))
	}
	var v [6]int64
	for i := range arr {
		if v[i], err = arr[i].AsInt64(); err != nil {
			return limit.Result{}, fmt.Errorf("%w: element %d: %v", ErrBadReply, i, err)
		}
	}
	return limit.Result{
		Allowed:      v[0] == 1,
		Remaining:    v[1],
		ResetAfterMS: v[2],
		RetryAfterMS: v[3],
		NowMS:        v[4],
		TTLMS:        v[5],
	}, nil
}

// Ping sends PING: nil when Redis answers. Before a Store built by Dial or
// NewFromURL has connected, and after Close, it returns the error Take
// would (ErrNotConnected, ErrClosed). Meant for start-up messages and health
// checks.
func (s *Store) Ping(ctx context.Context) error {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return s.unusable()
	}
	return r.c.Do(ctx, r.c.B().Ping().Build()).Error()
}

// unusable is the error of a call made after Close or before the first
// connection.
func (s *Store) unusable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if e := s.lastErr.Load(); e != nil {
		return fmt.Errorf("%w: %w", ErrNotConnected, e.err)
	}
	return ErrNotConnected
}

// Close stops connecting in the background and closes the client that Dial
// or NewFromURL created; a client passed to New is left to its owner. Take
// and Ping then fail with ErrClosed (the engine applies the failure mode).
// Close is idempotent and safe for concurrent use; it may wait for one
// connection attempt in flight (at most the dial timeout).
func (s *Store) Close() {
	s.closed.Store(true)
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.stopped
		}
		if s.owned {
			if r := s.client.Load(); r != nil {
				r.c.Close()
			}
		}
	})
}
