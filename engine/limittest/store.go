package limittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// Store is the reference limitstore.Store: one mutex, one map, the engine's own
// math (limitstore.Op.Apply) at a clock reading, TTLs honoured, writes as the
// Store contract says (an admitted Op writes every quota's State with its
// TTL; a limited one only the States Apply normalised; a Refund only the
// changed States of live keys, keeping their expiry). It is what every real
// store must be equivalent to, and the store of tests that need a correct
// one. Deciding for keys already present allocates nothing. It is safe for
// concurrent use.
type Store struct {
	// Info is what the store tells the engine about itself; NewStore leaves
	// Name empty ("custom"). Set it before the store is used.
	Info limitstore.Info

	now   func() time.Time
	mu    sync.Mutex
	m     map[string]*entry
	keys  []string
	calls int
	lease map[string]map[[limitstore.TokenSize]byte]lease // concurrency slots (lease.go)
}

type entry struct {
	st  limitstore.State
	exp int64 // Unix ms at which the entry is dead
}

var (
	_ limitstore.Resetter                     = (*Store)(nil)
	_ limitstore.Resetter                     = FailingStore{}
	_ limitstore.Resetter                     = SlowStore{}
	_ limitstore.Resetter                     = (*FlakyStore)(nil)
	_ interface{ Describe() limitstore.Info } = (*Store)(nil)
)

// NewStore returns an empty reference Store deciding at now's readings
// (time.Now when nil; tests pass Clock.Now).
func NewStore(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, m: map[string]*entry{}}
}

// Take is s.Take into a fresh Result, returned with the error: the
// two-value form of a store call, for tests and wrappers that look at the
// Result or pass it on.
func Take(ctx context.Context, s limitstore.Store, op *limitstore.Op) (limitstore.Result, error) {
	var res limitstore.Result
	err := s.Take(ctx, op, &res)
	return res, err
}

// Take implements limitstore.Store.
func (s *Store) Take(_ context.Context, op *limitstore.Op, res *limitstore.Result) error {
	now := s.now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	n := min(max(op.N, 0), limitstore.MaxQuotas)
	var es [limitstore.MaxQuotas]*entry
	var sts [limitstore.MaxQuotas]limitstore.State
	for i := range n {
		e := s.m[string(op.Quotas[i].Key)] // a lookup with string(bytes) does not allocate
		if e != nil && e.exp <= now {
			e.st, e.exp = limitstore.State{}, 0 // expired: absent
		}
		es[i] = e
		if e != nil {
			sts[i] = e.st
		}
	}
	s.applyBlock(op, &sts, now, res)
	for i := range n {
		ttl, e := res.Quotas[i].TTLMS, es[i]
		switch {
		case ttl <= 0:
		case op.Refund:
			if e != nil && e.exp > now {
				e.st = sts[i] // a refund keeps the expiry and never creates a key
			}
		default:
			if e == nil {
				k := string(op.Quotas[i].Key)
				e = new(entry)
				s.m[k] = e
				s.keys = append(s.keys, k)
			}
			e.st, e.exp = sts[i], now+ttl
		}
	}
	return nil
}

// Describe describes the store to the engine (limitstore.Info): it returns
// Info, with Blocks set (the store decides blocks, Op.Block).
func (s *Store) Describe() limitstore.Info {
	i := s.Info
	i.Blocks = true
	return i
}

// Calls returns how many times Take or Reset was called.
func (s *Store) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Keys returns every key written, in the order of their first write.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// Reset implements limitstore.Resetter, all under the store's one lock: a
// live entry's State becomes the empty State of the next epoch, keeping its
// expiry (a block record's becomes the zero record, none); any other key
// is deleted.
func (s *Store) Reset(_ context.Context, keys [][]byte) error {
	now := s.now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	for _, k := range keys {
		if e := s.m[string(k)]; e != nil && e.exp > now {
			e.st = limitstore.State{Epoch: e.st.Epoch + 1}
		} else {
			delete(s.m, string(k))
		}
	}
	return nil
}

// Clear forgets every key.
func (s *Store) Clear() {
	s.mu.Lock()
	clear(s.m)
	s.keys = nil
	s.mu.Unlock()
}

// ErrDown is the error of FailingStore and of FlakyStore while failing.
var ErrDown = errors.New("limittest: store down")

// FailingStore fails every call, as a backend that is down (Err, or ErrDown
// when nil) or, with Panic, as a store with a bug (Take panics).
type FailingStore struct {
	// Err is the error every call returns (nil: ErrDown).
	Err error
	// Panic makes every call panic instead.
	Panic bool
}

// Take implements limitstore.Store.
func (f FailingStore) Take(context.Context, *limitstore.Op, *limitstore.Result) error {
	if f.Panic {
		panic("limittest: store bug")
	}
	if f.Err != nil {
		return f.Err
	}
	return ErrDown
}

// Reset implements limitstore.Resetter: it fails (or panics) as Take does.
func (f FailingStore) Reset(ctx context.Context, _ [][]byte) error {
	return f.Take(ctx, nil, nil)
}

// errNoReset is the error of a wrapper's Reset whose Store is not a
// limitstore.Resetter.
var errNoReset = fmt.Errorf("limittest: the wrapped store does not implement limitstore.Resetter: %w", errors.ErrUnsupported)

// SlowStore passes every call to Store after Delay, as a backend that
// answers late; Delay 0 means never (a backend that stopped answering: the
// call blocks until its context ends). A call whose context ends first
// returns the context's error, as the Store contract requires. Wrap it with
// guard.New for a store timeout.
type SlowStore struct {
	// Store answers the calls once Delay has passed.
	Store limitstore.Store
	// Delay is how late each call is answered; 0: never.
	Delay time.Duration
}

// Take implements limitstore.Store.
func (s SlowStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var wait <-chan time.Time
	if s.Delay > 0 {
		t := time.NewTimer(s.Delay)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wait:
	}
	return s.Store.Take(ctx, op, res)
}

// Reset implements limitstore.Resetter: Store's Reset, after Delay, as
// Take.
func (s SlowStore) Reset(ctx context.Context, keys [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var wait <-chan time.Time
	if s.Delay > 0 {
		t := time.NewTimer(s.Delay)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wait:
	}
	r, ok := s.Store.(limitstore.Resetter)
	if !ok {
		return errNoReset
	}
	return r.Reset(ctx, keys)
}

// FlakyStore passes calls to Store until switched: Fail makes every call
// return ErrDown, Hang makes every call block until its context ends (the
// timeout of a guard.New wrapper), Heal restores. It counts its calls and
// the failed ones. It describes itself with Store's Name (when Store
// describes itself). Safe for concurrent use.
type FlakyStore struct {
	// Store answers the calls while the FlakyStore is healthy.
	Store        limitstore.Store
	mode         atomic.Int32
	calls, fails atomic.Int64
}

const (
	healthy int32 = iota
	failing
	hanging
)

// Fail makes every later call fail with ErrDown.
func (f *FlakyStore) Fail() { f.mode.Store(failing) }

// Hang makes every later call block until its context ends.
func (f *FlakyStore) Hang() { f.mode.Store(hanging) }

// Heal makes every later call reach Store again.
func (f *FlakyStore) Heal() { f.mode.Store(healthy) }

// Take implements limitstore.Store.
func (f *FlakyStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) error {
	f.calls.Add(1)
	switch f.mode.Load() {
	case failing:
		f.fails.Add(1)
		return ErrDown
	case hanging:
		f.fails.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	return f.Store.Take(ctx, op, res)
}

// Reset implements limitstore.Resetter: Store's Reset, failing or hanging
// as Take does (and counted with Take's calls).
func (f *FlakyStore) Reset(ctx context.Context, keys [][]byte) error {
	f.calls.Add(1)
	switch f.mode.Load() {
	case failing:
		f.fails.Add(1)
		return ErrDown
	case hanging:
		f.fails.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	r, ok := f.Store.(limitstore.Resetter)
	if !ok {
		return errNoReset
	}
	return r.Reset(ctx, keys)
}

// Calls returns how many times Take or Reset was called.
func (f *FlakyStore) Calls() int64 { return f.calls.Load() }

// Failures returns how many calls failed (or hung) because of Fail or Hang.
func (f *FlakyStore) Failures() int64 { return f.fails.Load() }

// Describe describes the store to the engine (limitstore.Info).
func (f *FlakyStore) Describe() limitstore.Info {
	var info limitstore.Info
	if d, ok := f.Store.(interface{ Describe() limitstore.Info }); ok {
		info = d.Describe()
	}
	return info
}
