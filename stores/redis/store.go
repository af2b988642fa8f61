package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

var (
	// ErrNotConnected means the Store has not reached Redis yet: it was
	// built by NewFromURL or Dial while Redis was unreachable and keeps
	// connecting in the background. Take returns it (wrapped, with the last
	// connection error) so that the engine applies the policy's FailureMode.
	ErrNotConnected = errors.New("redisstore: not connected to Redis yet")
	// ErrBadReply means the script answered with something other than the
	// integers it returns, or with a decision that limitstore.Op.Apply does not
	// reproduce from the states the script read; the wrapped message shows
	// what came back.
	ErrBadReply = errors.New("redisstore: unexpected script reply")
	// ErrClosed means the Store was closed: Take and Ping fail with it.
	ErrClosed = errors.New("redisstore: store is closed")
	// ErrInvalidOption means New, Dial or NewFromURL rejected an argument;
	// the wrapped message names it.
	ErrInvalidOption = errors.New("redisstore: invalid option")
)

// Store is a limitstore.Store backed by Redis (standalone, Sentinel or Cluster)
// through a rueidis client. Every decision is decided by one script call, at
// most (EVALSHA; EVAL once per node when the script is not cached yet); the
// script reads the clock once, reads the states of all the Op's quotas (one
// key each, one Cluster hash tag) and, when every quota admits, writes them
// all with their time to live, atomically. A denied request writes nothing
// (see limitstore.Op.Apply for the one exception, after a backward clock step).
//
// Group commit: on a standalone or Sentinel client, at most 2 script calls
// of a Store are out at once; a Take that finds one of them free sends its
// Op alone, at once (at low load nothing waits), and otherwise queues, and
// the queued Takes go together, up to 64 Ops, in one call of a batch script
// that decides them one after the other, each atomically and exactly as the
// same Takes sent one by one in that order (one TIME per call: they share
// the server's now; an Op whose key holds another type fails alone). A
// queued Take with a deadline waits at most 1 ms when every call out is
// slow. A Take returns when its context is done, queued or not; a queued
// Op is then never sent, an Op already sent may have been counted. On a
// Cluster client (a script touches one hash slot) every decision is its
// own call.
//
// It is safe for concurrent use; concurrent calls share connections through
// rueidis auto-pipelining. The zero value is not usable: call New, Dial or
// NewFromURL.
type Store struct {
	limitstore.Claims // the unnamed Limiters built on this Store

	guard  *guard.Store // the timeout, breaker and deny cache in front of the script calls; nil: WithoutGuard
	logger *slog.Logger
	// On a Cluster client, guarded: one guard per master (see cluster.go),
	// made with guardOpts and observer; guard then serves the slots no
	// known master serves.
	cluster   atomic.Pointer[clusterRoutes]
	guardOpts []guard.Option
	observer  guard.Observer
	eviction  atomic.Pointer[string] // maxmemory-policy as read (prepareNodes); nil: not read

	// A client the Store dialled: its connections, dropped when Redis
	// answers READONLY or MASTERDOWN (notPrimary); nil for New's client.
	conns                          *connSet
	notPrimaryAt, notPrimaryLogged atomic.Int64 // Unix ns of the last drop, of its last log line
	client                         atomic.Pointer[clientRef]
	clock                          func() time.Time // nil: the server's TIME
	closed                         atomic.Bool
	batch                          batcher // group commit

	// Set by Dial when the Store owns its client.
	owned     bool
	lastErr   atomic.Pointer[errRef] // the latest failed connection attempt
	stop      chan struct{}          // closed by Close
	stopped   chan struct{}          // closed when the connect loop ends
	closeOnce sync.Once

	leaseTimeout time.Duration // the timeout of a lease call (lease.go); 0: guard.DefaultTimeout

	listening atomic.Pointer[listener] // the subscription to the Resets of other Stores (resets.go)
	subOpt    *rueidis.ClientOption    // set by Dial: the subscription's own client is made from it (resets.go)
}

// clientRef is the Store's client and whether its calls may be batched
// (not on a Cluster: see batches).
type clientRef struct {
	c       rueidis.Client
	batches bool
}

func newClientRef(c rueidis.Client) *clientRef { return &clientRef{c, batches(c)} }

type errRef struct{ err error }

var (
	_ limitstore.Store                        = (*Store)(nil)
	_ interface{ Describe() limitstore.Info } = (*Store)(nil)
)

// Option configures New, Dial and NewFromURL.
type Option func(*config) error

type config struct {
	clock     func() time.Time
	client    func(*rueidis.ClientOption)
	guard     []guard.Option
	observer  guard.Observer
	unguarded bool
	logger    *slog.Logger
	timeout   time.Duration // WithTimeout's; 0: the default
}

// WithTimeout bounds each decision's wait for a Redis that answers nothing
// (default 100 ms; see package guard for what the timeout measures). It
// must be positive and at most guard.MaxTimeout (1 min).
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > guard.MaxTimeout {
			return fmt.Errorf("%w: WithTimeout(%v): must be positive and at most %v", ErrInvalidOption, d, guard.MaxTimeout)
		}
		c.guard = append(c.guard, guard.WithTimeout(d))
		c.timeout = d
		return nil
	}
}

// WithObserver sets the receiver of the Store's protection events (its
// deny cache's answers and its circuit breaker's skips and transitions:
// see guard.Observer); promlimit's Observer is one. On a Cluster, where
// each master has a breaker, every opening is reported and a closing once
// no master's breaker is open. nil is an error.
func WithObserver(o guard.Observer) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: WithObserver(nil)", ErrInvalidOption)
		}
		c.guard = append(c.guard, guard.WithObserver(o))
		c.observer = o
		return nil
	}
}

// WithLogger sets the logger of the Store's operational messages: the
// circuit breaker's transitions (one line when it opens, one when it
// closes) and, once, a maxmemory-policy under which Redis may evict the
// limiter's keys (see EvictionPolicy). Default: slog.Default(). nil is an
// error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// WithoutGuard leaves the Store's calls unprotected: no timeout of its own,
// no circuit breaker, no deny cache, and the caller's context reaches
// rueidis as it is (its cancellation too). For a caller that wraps the
// Store in a guard.New of its own, or that needs its cancellation honoured
// (a batch job's Consume); the WithTimeout, WithObserver and WithLogger
// options are then ignored. Behind an HTTP adapter, keep the guard: with
// it, a client cannot make a FailOpen policy admit it by cancelling its
// request.
func WithoutGuard() Option {
	return func(c *config) error {
		c.unguarded = true
		return nil
	}
}

// newStore returns a Store on cfg with its protections, not yet connected.
func newStore(cfg *config) *Store {
	s := &Store{clock: cfg.clock, logger: cfg.logger, leaseTimeout: cfg.timeout}
	s.batch.waiters.New = newWaiter
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if cfg.unguarded {
		return s
	}
	opts := append(cfg.guard[:len(cfg.guard):len(cfg.guard)], guard.WithLogger(s.logger))
	if cfg.clock != nil {
		// The deny cache counts down on the process's monotonic clock,
		// which an injected clock need not follow.
		opts = append(opts[:len(opts):len(opts)], guard.WithoutDenyCache())
	}
	g, err := guard.New((*backend)(s), opts...)
	if err != nil {
		panic(err) // every option was checked when it was applied
	}
	s.guard, s.guardOpts, s.observer = g, opts, cfg.observer
	return s
}

// WithClock makes the Store decide at now() (read once per decision, on the
// caller's machine, sent to the script in whole Unix milliseconds) instead of
// the Redis server's TIME. Meant for deterministic tests: in production the
// server clock is what lets replicas share one allowance without
// synchronised clocks. nil is an error. A reading at or before the Unix
// epoch (0 ms or less: outside the times the script's arithmetic holds for,
// and 0 is how a call asks for the server's TIME), or beyond 2^52 ms after
// it (the year 144683: the script computes in doubles, exact below 2^53,
// and a flight's answers take the reading each Op sent) fails that Take
// with an error saying so; nothing is sent.
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
// Store never reads through the cache). New reads maxmemory-policy from
// Redis, loads the scripts and opens the client's pipelined connections on
// every node (at most 2 s in all: see EvictionPolicy), so that the first
// decision costs one script call and no dial. The connections counted are
// rueidis' default for client's mode (PipelineMultiplex 0); a client built
// with more opens the rest on first use. A nil client is an error.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	s := newStore(cfg)
	s.adopt(client)
	return s, nil
}

// Describe tells the engine that Store is "redis", the store label in
// metrics, and shared between processes (limit.New then asks for a key
// prefix of the service's own: limit.WithKeyPrefix).
func (s *Store) Describe() limitstore.Info {
	return limitstore.Info{Name: "redis", Shared: true, Blocks: true}
}

// backend is the Store without its protections: its Take is the script
// call, which the Store's guard wraps.
type backend Store

func (b *backend) Describe() limitstore.Info {
	return limitstore.Info{Name: "redis", Shared: true, Blocks: true}
}

// Take implements limitstore.Store for the Store's guard: take.
func (b *backend) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = b.take(ctx, op)
	return err
}

func (b *backend) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	if blocked(op) {
		return checked((*Store)(b).blockTake(ctx, op, nil)) // block.go
	}
	if op.Peek {
		return (*Store)(b).peek(ctx, op, nil)
	}
	return (*Store)(b).script(ctx, op)
}

// Client returns the rueidis client, or nil while a Store built by Dial or
// NewFromURL has not connected yet.
func (s *Store) Client() rueidis.Client {
	if r := s.client.Load(); r != nil {
		return r.c
	}
	return nil
}

// Take implements limitstore.Store: one script call, which concurrent Takes
// may share (group commit: see Store), behind the Store's guard (its
// timeout, circuit breaker and deny cache; see package guard; on a Cluster,
// the guard of the key's master): ctx's values and its deadline reach the
// call, its cancellation does not, but a ctx cancelled while the call
// waits makes Take return with an error wrapping context.Canceled, at once
// or 10 ms after the call began when that is later (a queued Op is then
// never sent; one sent stays counted; WithoutGuard: ctx as it is). The error is non-nil
// when Redis could not be asked or did not answer in time; the request may
// still have been counted when the deadline expired after the script ran,
// but never when the call ended while it waited for a call to share. The error's text starts with
// "redisstore: ", once, whatever path produced it; errors.Is finds the
// sentinels (ErrClosed, ErrNotConnected, ErrBadReply, ErrReconnectBackoff),
// context.DeadlineExceeded and, for a call the open breaker did not make,
// limitstore.ErrCircuitOpen (wrapping the failure that opened it).
func (s *Store) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	if s.guard == nil {
		*res, err = checked((*backend)(s).take(ctx, op))
		return err
	}
	g := s.guard
	if cr := s.cluster.Load(); cr != nil {
		if n := cr.route(s, op); n != nil {
			g = n.guard
		}
	}
	if err := g.Take(ctx, op, res); err != nil {
		return prefixed(err) // the guard's own: a timeout, an open breaker
	}
	return nil
}

// script is Take without the protections: one script call; an answer that
// the server is not a usable primary makes the Store dial again.
func (s *Store) script(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	return s.scriptVia(ctx, op, nil)
}

// scriptVia is script through via, a client of one Cluster node (nil: the
// Store's client).
func (s *Store) scriptVia(ctx context.Context, op *limitstore.Op, via rueidis.Client) (limitstore.Result, error) {
	res, err := s.scriptCall(ctx, op, via)
	if err != nil {
		s.notPrimary(err)
	}
	return res, err
}

// scriptCall encodes op and makes (or joins) its script call, through via
// when it is not nil.
func (s *Store) scriptCall(ctx context.Context, op *limitstore.Op, via rueidis.Client) (limitstore.Result, error) {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return limitstore.Result{}, s.unusable()
	}
	n := op.N
	if n < 1 || n > limitstore.MaxQuotas {
		return limitstore.Result{}, fmt.Errorf("redisstore: Op with %d quotas (want 1 to %d)", n, limitstore.MaxQuotas)
	}
	// The keys and the argument are built into one pooled buffer; the
	// strings handed to rueidis are views of it (the engine reuses the Op's
	// key bytes, so they are copied in any case). No allocation of ours per
	// call.
	var now int64 // 0: the server's TIME
	if s.clock != nil {
		t := s.clock()
		if now = t.UnixMilli(); now <= 0 {
			return limitstore.Result{}, fmt.Errorf("redisstore: WithClock's clock read %s, at or before the Unix epoch (want a time after 1970)", t.UTC().Format(time.RFC3339Nano))
		} else if now > maxClockMS {
			return limitstore.Result{}, fmt.Errorf("redisstore: WithClock's clock read %s, %d ms after the Unix epoch: beyond %d ms, the script's arithmetic is not exact there", t.UTC().Format(time.RFC3339Nano), now, int64(maxClockMS))
		}
	}
	w := s.batch.waiters.Get().(*waiter)
	w.encode(op, now)
	if via != nil {
		return checked(s.call(ctx, via, op, w))
	}
	if !r.batches {
		return checked(s.call(ctx, r.c, op, w))
	}
	return checked(s.take(ctx, r.c, op, w))
}

// errPrefix starts the text of every error the Store returns, once.
const errPrefix = "redisstore: "

// prefixedError is an error whose text has been given errPrefix exactly
// once (see prefixed); it unwraps to the original.
type prefixedError struct {
	msg string
	err error
}

func (e *prefixedError) Error() string { return e.msg }
func (e *prefixedError) Unwrap() error { return e.err }

// prefixed returns err with errPrefix once, at the start of its text,
// whichever layers wrapped it on the way (this package's sentinels and
// messages carry the prefix already, and reach the caller through rueidis,
// the dial gate, a flight or Dial's own wrapping, each of which used to add
// or keep one); errors.Is and errors.As see through it. It is applied where
// an error leaves the package (Take, Ping, Dial), and only on failures.
func prefixed(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.HasPrefix(msg, errPrefix) && strings.Count(msg, errPrefix) == 1 {
		return err
	}
	return &prefixedError{errPrefix + strings.ReplaceAll(msg, errPrefix, ""), err}
}

// checked is a Take's outcome with its error prefixed.
func checked(res limitstore.Result, err error) (limitstore.Result, error) {
	if err != nil {
		return limitstore.Result{}, prefixed(err)
	}
	return res, nil
}

// quotaCode is the script's algorithm integer of quota q of op: the
// algorithm's number, -1 for a calendar window (Quota.Calendar), and for
// a token bucket with reservations (MaxWaitMS > 0) 2 + 4*(mw + 2^22*rw), its MaxWait mw and the Op's wait rw =
// min(max(op.WaitMS, 0), mw), both ms (lua/take.lua). limit.New keeps
// MaxWait under 2^22 ms; a larger one, outside the contract, is sent as
// 2^22-1.
func quotaCode(op *limitstore.Op, q *limitstore.Quota) int64 {
	if q.Calendar && q.Algorithm == limit.FixedWindow {
		return -1 // a calendar window: its start is the phase
	}
	if q.Algorithm != limit.TokenBucket || q.MaxWaitMS <= 0 {
		return algorithmCode(q.Algorithm)
	}
	mw := min(q.MaxWaitMS, maxWaitCode-1)
	rw := min(max(op.WaitMS, 0), mw)
	if op.Refund {
		rw = 0
	}
	return 2 + 4*(mw+maxWaitCode*rw)
}

// maxWaitCode bounds the MaxWait, in ms, that quotaCode packs (2^22).
const maxWaitCode = 1 << 22

// algorithmCode is the script's number for an algorithm.
func algorithmCode(a limit.Algorithm) int64 {
	switch a {
	case limit.FixedWindow:
		return 1
	case limit.TokenBucket:
		return 2
	}
	return 0
}

// decide turns the script's reply (its clock reading, negated for a
// denial, and the values it read: see lua/take.lua) into the Result:
// limitstore.Op.Apply on those states, which must admit exactly when the script
// did.
func decide(op *limitstore.Op, resp rueidis.RedisResult) (limitstore.Result, error) {
	s, err := resp.ToString()
	if err != nil {
		return limitstore.Result{}, err // prefixed by Take
	}
	return decideReply(op, s)
}

// decideReply is decide on the reply's bytes (take.lua's reply: r, then
// the states read).
func decideReply(op *limitstore.Op, s string) (limitstore.Result, error) {
	r, states, err := splitTake(s, op.N)
	if err != nil {
		return limitstore.Result{}, err
	}
	return decideStates(op, r, states)
}

// splitTake cuts take.lua's reply to an Op of n quotas into r and the
// states read (see decideStates).
func splitTake(s string, n int) (r int64, states string, err error) {
	if len(s) < 8 {
		return 0, "", fmt.Errorf("%w: %d bytes, want %d", ErrBadReply, len(s), 8+replyStateLen*n)
	}
	return le64(s, 0), s[8:], nil
}

// decideStates decides op from the script's answer: r, the clock reading
// in Unix ms, negated when the script denied; s, the states it read
// (replyStateLen bytes per quota; for an Op of one quota also the value as
// stored, stateLen bytes, or none: no value).
func decideStates(op *limitstore.Op, r int64, s string) (limitstore.Result, error) {
	n := op.N
	if len(s) != replyStateLen*n && (n != 1 || len(s) != 0 && len(s) != stateLen) {
		return limitstore.Result{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadReply, 8+len(s), 8+replyStateLen*n)
	}
	now, allowed := r, true
	if now < 0 {
		now, allowed = -now, false
	}
	if now == 0 {
		return limitstore.Result{}, fmt.Errorf("%w: no clock reading", ErrBadReply)
	}
	sts := readStates(op, now, s)
	res := op.Apply(&sts, now)
	if res.Allowed != allowed {
		return limitstore.Result{}, fmt.Errorf("%w: the script decided %v, the engine %v on states %v at %d", ErrBadReply, allowed, res.Allowed, sts, now)
	}
	return res, nil
}

// readStates decodes the values a script read for op's quotas (all of
// stateLen or all of replyStateLen bytes, or none at all) at now.
func readStates(op *limitstore.Op, now int64, s string) (sts [limitstore.MaxQuotas]limitstore.State) {
	if op.N < 1 || len(s) == 0 {
		return sts
	}
	l := len(s) / op.N
	for i := range op.N {
		v := s[l*i : l*(i+1)]
		// The script's rule (lua/take.lua, "the state read"): a state
		// counts only while its expiry is after now, and not absurdly far
		// ahead.
		if ex := le64(v, 24); ex <= now || ex-now > maxStateLifeMS {
			continue
		}
		a, b, c := le64(v, 0), le64(v, 8), le64(v, 16)
		if len(v) == replyStateLen {
			sts[i].Epoch = le64(v, stateLen)
		}
		if op.Quotas[i].Algorithm == limit.TokenBucket {
			sts[i].TAT, sts[i].TATFrac = a, b
		} else {
			sts[i].Window, sts[i].Count, sts[i].Prev = a, b, c
		}
	}
	return sts
}

// maxClockMS is the latest caller's clock reading a Take accepts (Unix ms,
// 2^52: the year 144683). The script computes in doubles, exact below 2^53,
// and adds up to 2^37 ms (maxStateLifeMS) and a bucket's slack to now; a
// flight's answers take the reading each Op sent (splitBatch), so beyond
// 2^53 the engine and the script decided at two instants (ErrBadReply, or
// Results other than the same Op's alone) and a write's deadline could
// fail the whole flight.
const maxClockMS = 1 << 52

// stateLen is the length of a stored value of epoch 0: five little-endian
// 64-bit integers (see lua/prelude.lua). A value of a key that a Reset
// found live has a sixth, its epoch (limitstore.State.Epoch): epochLen
// bytes; a value of stateLen bytes, as every value written before epochs
// existed, is of epoch 0.
const (
	stateLen = 40
	epochLen = 48
)

// replyStateLen is the length of a state in the scripts' replies (their
// general paths, a flight's and block.lua's): a value of stateLen bytes
// comes with 8 zero bytes, so that each is epochLen long.
const replyStateLen = epochLen

// maxStateLifeMS is the furthest ahead of now a stored state's expiry may
// be and still count (2^37 ms, 1590 days: beyond any policy's; see
// lua/take.lua, "the state read").
const maxStateLifeMS = 1 << 37

// le64 is the little-endian 64-bit integer at s[i:i+8].
func le64(s string, i int) int64 {
	_ = s[i+7]
	return int64(uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56)
}

// Ping sends PING: nil when Redis answers, else the error (its text starts
// with "redisstore: ", as every error of the Store's does). Before a Store built by Dial or
// NewFromURL has connected, and after Close, it returns the error Take
// would (ErrNotConnected, ErrClosed). Meant for start-up messages and health
// checks.
func (s *Store) Ping(ctx context.Context) error {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return s.unusable()
	}
	return prefixed(r.c.Do(ctx, r.c.B().Ping().Build()).Error())
}

// unusable is the error of a call made after Close or before the first
// connection.
func (s *Store) unusable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if e := s.lastErr.Load(); e != nil {
		return prefixed(fmt.Errorf("%w: %w", ErrNotConnected, e.err))
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
	s.batch.mu.Lock()
	s.failQueued(ErrClosed)
	s.batch.mu.Unlock()
	s.closeOnce.Do(func() {
		s.stopListening()
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
