// Package guard protects the calls to a limitstore.Store that does I/O: a
// timeout per call, a circuit breaker and a local cache of the store's
// denials, in one value that every Limiter on the store shares.
//
// The engine (package limit) decides rate limits and calls its Store
// straight. A store that waits on a network wraps itself with New, once,
// and the value it returns is the store the user holds and hands to every
// limit.New: the Redis store does so itself, so a *redisstore.Store is
// already protected. Two wrappers of one backend are two protections, each
// with its own breaker and deny cache; share one wrapper to share them.
//
//	s, err := guard.New(myStore, guard.WithTimeout(50*time.Millisecond))
//	l, err := limit.New(s, limit.Policy{Limit: 100, Window: time.Minute})
//
// What a call meets, in order:
//   - the deny cache: once the store has denied an Op (same keys, quotas and
//     cost) until T, the wrapper denies it itself until T, with the numbers
//     the store gave, counted down; a Refund drops the cached denials of its
//     keys;
//   - the circuit breaker: after the store answered nothing for a whole
//     timeout, or failed 5 calls in a row, calls fail at once with an error
//     wrapping limitstore.ErrCircuitOpen (the policy's FailureMode decides), and
//     one probe call every 250 ms finds out whether the store is back;
//   - the timeout: calls that start within the same millisecond share one
//     deadline; a call fails when the store answered nothing at all for the
//     timeout, and waits up to twice the timeout while the store answers
//     other calls (a late reply is queueing, not an outage).
//
// The call's context keeps the caller's values and its deadline, when that
// comes before the timeout would, but not its cancellation as such: the
// store's answer still counts, and a caller whose context was done before
// the call (a client that half-closed its connection) gets the store's
// decision, as one that stays (should the store fail, the engine admits
// no caller that ended: see limit.Limiter.ConsumeN). A caller whose
// context is cancelled while the call waits is released: at once, or 10 ms
// after the call began when it left sooner, Take returns an error wrapping
// context.Canceled (context.DeadlineExceeded when the caller's own
// deadline passed; the engine then admits nothing, whatever the failure
// mode, so cancelling cannot make a FailOpen policy admit a client),
// provided the store waits on its context's Done channel, as the Redis
// store and every network client do; what the call did in the store stays
// done (a charge is not refunded), and the breaker learns nothing from it
// (a probe's caller leaving lets the next decision probe). A call that
// returns within those 10 ms pays nothing for this; no goroutine is
// started.
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// DefaultTimeout bounds each store call when WithTimeout is not given.
const DefaultTimeout = 100 * time.Millisecond

// Observer receives the wrapper's events; limit.Observer implementations
// (promlimit's) satisfy it. It is called synchronously on the request path
// and must be fast and safe for concurrent use. The events are
//   - "deny-cache": a call the deny cache answered with the store's earlier
//     denial (the store was not asked);
//   - "breaker-open": a call not made because the breaker is open;
//   - "opened": the breaker opened (once per transition);
//   - "closed": it closed again (a call succeeded).
type Observer interface {
	StoreEvent(store, event string)
}

// Store is a limitstore.Store behind a timeout, a circuit breaker and a deny
// cache. It is safe for concurrent use; share one value between every
// Limiter on the backend.
type Store struct {
	next    limitstore.Store
	name    string
	shared  bool // next's Info.Shared
	timeout time.Duration
	clock   func() int64 // monotonic ns; nil: monoNow
	obs     Observer
	log     *slog.Logger

	breaker breaker
	deny    *denyCache // nil: WithoutDenyCache
	ticks   tickSource
	ctxs    sync.Pool // *storeCtx
	// unwatched: no caller's cancellation is watched (the path before
	// releasing callers, for benchmarks beside it).
	unwatched bool
	blocks    bool // next's Info.Blocks
}

// Option configures New. Options are checked by New, which names the
// option in its error (wrapping limit.ErrInvalidOption).
type Option func(*Store) error

// MaxTimeout is the longest timeout WithTimeout accepts: a rate-limit
// decision that waits a minute for its store has long outlived its
// request.
const MaxTimeout = time.Minute

// WithTimeout sets how long a call may wait for a store that answers
// nothing (default DefaultTimeout); it must be positive and at most
// MaxTimeout.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d <= 0 || d > MaxTimeout {
			return fmt.Errorf("%w: guard.WithTimeout(%v): must be positive and at most %v", limit.ErrInvalidOption, d, MaxTimeout)
		}
		s.timeout = d
		return nil
	}
}

// WithObserver sets the receiver of the wrapper's events (see Observer);
// default none. nil is an error. A panic inside o is recovered and drops
// that one event.
func WithObserver(o Observer) Option {
	return func(s *Store) error {
		if o == nil {
			return fmt.Errorf("%w: guard.WithObserver(nil)", limit.ErrInvalidOption)
		}
		s.obs = o
		return nil
	}
}

// WithLogger sets the logger of the breaker's transitions: one line when
// it opens, one when it closes, never one per call. Default: discard. nil
// is an error.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) error {
		if l == nil {
			return fmt.Errorf("%w: guard.WithLogger(nil)", limit.ErrInvalidOption)
		}
		s.log = l
		return nil
	}
}

// WithoutDenyCache turns the deny cache off. A store that decides at a
// clock the caller injected (a test's fake clock) needs it off: the cache
// counts its entries down on the process's monotonic clock, which a fake
// clock need not follow.
func WithoutDenyCache() Option {
	return func(s *Store) error {
		s.deny = nil
		return nil
	}
}

// withClock sets the monotonic clock (ns) the breaker, the deadlines and
// the deny cache read; tests set a fake one.
func withClock(now func() int64) Option {
	return func(s *Store) error {
		s.clock = now
		return nil
	}
}

// New wraps next. The wrapper's store label (for metrics and log lines) is
// next's own (limitstore.Info.Name through a Describe method), "custom"
// without one, and it is shared between processes when next says so
// (Info.Shared). A nil next is an error.
func New(next limitstore.Store, opts ...Option) (*Store, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: guard.New: store is nil", limit.ErrInvalidOption)
	}
	s := &Store{next: next, name: "custom", timeout: DefaultTimeout, deny: newDenyCache()}
	if d, ok := next.(interface{ Describe() limitstore.Info }); ok {
		info := d.Describe()
		if info.Name != "" {
			s.name = info.Name
		}
		s.shared = info.Shared
		s.blocks = info.Blocks
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	} else {
		s.obs = safeObserver{s.obs}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.breaker.lastSuccess.Store(never)
	s.ticks = tickSource{timeout: int64(s.timeout), store: s}
	s.ctxs.New = func() any { return &storeCtx{own: make(chan struct{})} }
	return s, nil
}

// Describe reports the wrapped store's description.
func (s *Store) Describe() limitstore.Info {
	return limitstore.Info{Name: s.name, Shared: s.shared, Blocks: s.blocks}
}

// Claim passes limit.New's record of an unnamed Limiter to the wrapped
// store when it keeps limitstore.Claims, so that wrapping a store never
// drops its check; a wrapped store without Claims is not checked (true).
func (s *Store) Claim(key string) bool {
	if c, ok := s.next.(interface{ Claim(string) bool }); ok {
		return c.Claim(key)
	}
	return true
}

// now reads the wrapper's clock: monotonic nanoseconds since the process
// started (or a test's fake).
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock()
	}
	return monoNow()
}

// monoStart anchors monoNow: time.Since reads the monotonic clock.
var monoStart = time.Now()

// monoNow is the monotonic clock in nanoseconds since the process started.
func monoNow() int64 { return int64(time.Since(monoStart)) }

// Take implements limitstore.Store: the deny cache, then the breaker, then the
// wrapped store's Take under the shared deadline. Its errors are the
// wrapped store's, context.DeadlineExceeded when the store did not answer
// in time, or limitstore.ErrCircuitOpen (wrapping the failure that opened the
// breaker) when the store was not called. A panic of the wrapped store is
// the engine's to recover. A Peek is never answered by the deny cache nor
// cached (it is a look at the store's own numbers), and fails with an error
// wrapping errors.ErrUnsupported when the wrapped store is not a
// limitstore.Resetter.
func (s *Store) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) error {
	now := s.now()
	switch {
	case op.Peek:
		if _, ok := s.next.(limitstore.Resetter); !ok {
			return errNoResetter
		}
	case op.Refund:
		// Before the call and after it: a denial whose call overlaps the
		// Refund is then neither kept nor recorded (denyCache.store).
		s.deny.drop(op)
		err := s.guarded(ctx, op, nil, now, res)
		s.deny.drop(op)
		return err
	default:
		if cached, ok := s.deny.lookup(op, now); ok {
			s.obs.StoreEvent(s.name, "deny-cache")
			*res = cached
			return nil
		}
	}
	return s.guarded(ctx, op, nil, now, res)
}

// Reset implements limitstore.Resetter: it drops the deny cache's denials of
// the keys, then calls the wrapped store's Reset behind the breaker and
// under the shared deadline, as Take. The wrapped store must be a
// limitstore.Resetter (else an error wrapping errors.ErrUnsupported). No
// keys: nothing to do.
func (s *Store) Reset(ctx context.Context, keys [][]byte) error {
	if _, ok := s.next.(limitstore.Resetter); !ok {
		return errNoResetter
	}
	if len(keys) == 0 {
		return nil
	}
	s.deny.dropKeys(keys)
	err := s.guarded(ctx, nil, keys, s.now(), nil)
	s.deny.dropKeys(keys) // a denial of a Take that raced the Reset
	return err
}

// DropDenials drops the deny cache's denials whose first key is one of
// keys: for a Reset made through another wrapper of the same backend (in
// another process), whose cached denials this one cannot see otherwise.
// The Redis store calls it for the Resets other Stores announce. Safe for
// concurrent use; without a deny cache it does nothing.
func (s *Store) DropDenials(keys [][]byte) { s.deny.dropKeys(keys) }

// errNoResetter is the error of a Peek or Reset through a wrapper whose
// store cannot do them.
var errNoResetter = fmt.Errorf("guard: the wrapped store does not implement limitstore.Resetter (Peek and Reset): %w", errors.ErrUnsupported)

// guarded makes one call of the wrapped store, started at now: Take(op)
// into *res, or, when op is nil, Reset(keys); behind the breaker, under the
// shared deadline (or the caller's, when it comes sooner).
func (s *Store) guarded(ctx context.Context, op *limitstore.Op, keys [][]byte, now int64, res *limitstore.Result) error {
	by, hasBy := ctx.Deadline()
	short := hasBy && time.Until(by) < s.timeout
	verdict := s.breaker.allow(now, !short)
	if verdict == skipStore {
		s.obs.StoreEvent(s.name, "breaker-open")
		return s.breaker.skipError()
	}
	if short {
		return s.takeBy(ctx, op, keys, by, res)
	}
	epoch := s.deny.epoch()
	dl := s.ticks.get(now)
	sc := s.ctxs.Get().(*storeCtx)
	sc.begin(ctx, dl, !s.unwatched)
	err := s.call(sc, op, keys, verdict, res)
	gone := err != nil && sc.released()
	if sc.end() {
		s.ctxs.Put(sc)
	}
	if gone {
		s.breaker.abandoned(s.now(), verdict == callProbe)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errCallerDeadline
		}
		return errCallerGone
	}
	end := s.now()
	if err == nil {
		if s.breaker.succeeded(end) {
			s.transitionClosed(end)
		}
		if op != nil && !op.Peek {
			s.deny.store(op, res, now, end, epoch)
		}
		return nil
	}
	silent := dl.why.Load() == whyStoreSilent
	if s.breaker.failed(end, silent, verdict == callProbe, err) {
		s.transitionOpened(silent, err)
	}
	return err
}

// transitionOpened reports that the breaker opened: an event and a log
// line, once per transition.
func (s *Store) transitionOpened(silent bool, err error) {
	s.obs.StoreEvent(s.name, "opened")
	why := "it failed 5 calls in a row"
	if silent {
		why = "it answered nothing for a whole store timeout"
	}
	s.log.Error("quotagate: store is failing ("+why+"); circuit breaker open: decisions follow each policy's FailureMode without calling it, one probe call every "+breakerCoolDown.String(),
		slog.String("store", s.name), slog.String("error", err.Error()))
}

// transitionClosed reports that the breaker closed at end: an event and a
// log line, once per transition.
func (s *Store) transitionClosed(end int64) {
	s.obs.StoreEvent(s.name, "closed")
	s.log.Info("quotagate: store answered again; circuit breaker closed: decisions call it again",
		slog.String("store", s.name), slog.Duration("open_for", time.Duration(end-s.breaker.openedAt.Load()).Round(time.Millisecond)))
}

// takeBy calls the wrapped store for a caller whose own deadline, by,
// comes before the wrapper's timeout would: the call ends at by (with
// context.DeadlineExceeded), or when the caller goes away (errCallerGone),
// and a call cut short there tells the breaker nothing about the store
// (such a caller is never the probe: see breaker.allow). This path
// allocates a context per call; a request without such a deadline takes
// the shared one.
func (s *Store) takeBy(ctx context.Context, op *limitstore.Op, keys [][]byte, by time.Time, res *limitstore.Result) error {
	if !time.Now().Before(by) {
		return context.DeadlineExceeded
	}
	start, epoch := s.now(), s.deny.epoch()
	parent := ctx
	if ctx.Err() != nil { // done before the call: the store's decision all the same
		parent = context.WithoutCancel(ctx)
	}
	cctx, cancel := context.WithDeadline(parent, by)
	err := s.call(cctx, op, keys, callStore, res)
	cut := cctx.Err() != nil
	gone := err != nil && cctx.Err() == context.Canceled
	cancel()
	if gone {
		return errCallerGone
	}
	end := s.now()
	if err == nil {
		if s.breaker.succeeded(end) {
			s.transitionClosed(end)
		}
		if op != nil && !op.Peek {
			s.deny.store(op, res, start, end, epoch)
		}
		return nil
	}
	if !cut && s.breaker.failed(end, false, false, err) {
		s.transitionOpened(false, err)
	}
	return err
}

// call runs the wrapped Take into *res (Reset when op is nil). A panic
// counts as a failed call for the breaker (a probe that panics must not
// leave the breaker probing for ever) and is then re-raised for the engine
// to recover and report.
func (s *Store) call(ctx context.Context, op *limitstore.Op, keys [][]byte, verdict breakerVerdict, res *limitstore.Result) error {
	done := false
	defer func() {
		if done {
			return
		}
		if sc, ok := ctx.(*storeCtx); ok {
			sc.end() // over too: its caller is no longer watched (and sc is not pooled)
		}
		if s.breaker.failed(s.now(), false, verdict == callProbe, errPanicked) {
			s.transitionOpened(false, errPanicked)
		}
	}()
	if op == nil {
		err := s.next.(limitstore.Resetter).Reset(ctx, keys)
		done = true
		return err
	}
	err := s.next.Take(ctx, op, res)
	done = true
	return err
}

// errCallerGone is what Take returns for a caller whose context was
// cancelled while the store call waited: the caller is released, the call
// may have been counted by the store.
var errCallerGone = fmt.Errorf("guard: the caller went away while the store was asked (its context was cancelled); the call may have been counted: %w", context.Canceled)

// errCallerDeadline is what Take returns for a caller whose own deadline
// passed while the store call waited (a deadline later than the guard's
// timeout, as the shared deadline rounds up to its tick).
var errCallerDeadline = fmt.Errorf("guard: the caller's deadline passed while the store was asked; the call may have been counted: %w", context.DeadlineExceeded)

// errPanicked is what the breaker records for a store call that panicked.
var errPanicked = fmt.Errorf("guard: the store panicked")

type nopObserver struct{}

func (nopObserver) StoreEvent(string, string) {}

// safeObserver drops an event whose Observer panics.
type safeObserver struct{ o Observer }

func (g safeObserver) StoreEvent(store, event string) {
	defer func() { _ = recover() }()
	g.o.StoreEvent(store, event)
}
