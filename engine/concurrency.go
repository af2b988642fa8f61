package limit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/quotagate/quotagate/engine/limitstore"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the Concurrency algorithm: at most Limit requests of one
// identity in flight at once, across every process on the store. A request
// takes a slot (a lease with a unique token, limitstore.Leaser.Acquire)
// before its handler and gives it back (Release) in Finish, which the
// adapters run when the handler returns or panics; while the handler runs
// past a third of its Lease, a timer renews the lease (one Acquire of the
// same token per Lease/3), so a slot outlives its Lease only while its
// holder lives.

// Concurrency bounds the requests of one identity in flight at once: Limit
// is the number of slots, Policy.Lease how long a slot stays taken when its
// holder vanishes (a killed process). It is not a rate: a Concurrency
// policy sends no RateLimit header fields, and its 429 carries Retry-After
// 1 (see Policy.Lease). The store must implement limitstore.Leaser (the
// memory and Redis stores do).
const Concurrency = limitstore.Concurrency

// DefaultLease is Policy.Lease's default for a Concurrency policy.
const DefaultLease = 10 * time.Second

// The bounds of Policy.Lease: a renewal (a store round trip) every Lease/3
// must land well inside the lease, and the store's keys live at most
// Lease + 1 s, within the longest time to live of any key (a day).
const (
	minLease = 100 * time.Millisecond
	maxLease = 24 * time.Hour
)

// maxSlots bounds the Limit of a Concurrency policy: one identity's leases
// are a set the stores scan.
const maxSlots = 100_000

// slotRetryAfter is the Retry-After of a Concurrency 429: a slot frees
// when any request in flight ends, at no time the store knows, so the
// engine sends the shortest delay the field can say.
const slotRetryAfter = time.Second

// SlotObserver is an optional interface of an Observer: one given to
// WithObserver that implements it is told every change of the slots this
// process holds for a Concurrency policy, by bucket (promlimit and
// otellimit expose them as a gauge of slots in flight). Refusals are
// Decision events with Outcome limited. Same rules as Observer: fast, no
// blocking, safe for concurrent use.
type SlotObserver interface {
	// Slots is called with +cost when a request takes slots and -cost
	// when it gives them back (or its lease is lost).
	Slots(bucket string, delta int64)
}

// slots is a Concurrency Limiter's state: its stores as Leasers, the lease,
// the holder tokens and the pooled slots.
type slots struct {
	primary, local limitstore.Leaser // local: FailLocal's, or nil
	leaseMS        int64
	renewEvery     time.Duration
	seed           [8]byte // random per Limiter: the first half of every token
	seq            atomic.Uint64
	pool           sync.Pool // *slot
	obs            SlotObserver
}

// slot is one request's hold on its identity's slots: the lease op (its
// key bytes copied, its token), the store it was taken from and the renewal
// timer. Pooled; gen tells a Decision's hold from a later one on the same
// value.
type slot struct {
	lim      *Limiter
	mu       sync.Mutex // held by a renewal's store call and by release
	gen      uint64
	released bool
	store    limitstore.Leaser
	op       limitstore.LeaseOp
	key      []byte
	bucket   string
	timer    *time.Timer
}

// resolveConcurrency validates the fields of a Concurrency policy (the
// common ones are checked already, Cost resolved in r).
func (p *Policy) resolveConcurrency(r resolved) (resolved, error) {
	switch {
	case p.Limit < 1:
		return r, fmt.Errorf("%w: Limit %d: a Concurrency policy needs Limit >= 1, the requests of one identity in flight at once (it has no default)", ErrInvalidPolicy, p.Limit)
	case p.Limit > maxSlots:
		return r, fmt.Errorf("%w: Limit %d is over the maximum %d slots of a Concurrency policy", ErrInvalidPolicy, p.Limit, maxSlots)
	case p.Window != 0:
		return r, fmt.Errorf("%w: Window is set, and means nothing for Concurrency (a slot is held while its request runs): drop Window; Lease bounds a vanished holder's slot", ErrInvalidPolicy)
	case p.Burst != 0:
		return r, fmt.Errorf("%w: Burst is only used by TokenBucket (Algorithm is Concurrency)", ErrInvalidPolicy)
	case p.BlockFor != 0 || p.BlockMax != 0:
		return r, fmt.Errorf("%w: BlockFor (or BlockMax) is set, and Concurrency has no blocks: a block follows a limited rate; a concurrency limit frees its slots as requests end", ErrInvalidPolicy)
	case p.Per != 0 || p.Location != nil:
		return r, fmt.Errorf("%w: Per (or Location) is set, and Concurrency has no calendar period: a slot is held while its request runs", ErrInvalidPolicy)
	case len(p.Quotas) > 0:
		return r, fmt.Errorf("%w: Quotas is set, and means nothing for Concurrency: mount a rate policy beside it (stacked mounts)", ErrInvalidPolicy)
	case p.Plans != nil || p.Plan != nil || p.DefaultPlan != "":
		return r, fmt.Errorf("%w: Plans is set, and Concurrency has no plans: one Limit per identity", ErrInvalidPolicy)
	case p.MaxWait != 0 || p.MaxWaiting != 0:
		return r, fmt.Errorf("%w: MaxWait needs Algorithm TokenBucket (Algorithm is Concurrency): a full identity is limited at once", ErrInvalidPolicy)
	case p.AlignWindows:
		return r, fmt.Errorf("%w: AlignWindows is set, and Concurrency has no windows", ErrInvalidPolicy)
	case p.CountStatus != nil:
		return r, fmt.Errorf("%w: CountStatus is set, and means nothing for Concurrency: every slot is given back when its request ends", ErrInvalidPolicy)
	case p.Lease < 0:
		return r, fmt.Errorf("%w: Lease %v is negative (0 means the default %v)", ErrInvalidPolicy, p.Lease, DefaultLease)
	case p.Lease != 0 && p.Lease < minLease:
		return r, fmt.Errorf("%w: Lease %v is below the minimum %v: the holder renews every Lease/3, a store round trip each", ErrInvalidPolicy, p.Lease, minLease)
	case p.Lease > maxLease:
		return r, fmt.Errorf("%w: Lease %v is over the maximum %v (a slot's key lives Lease + 1 s)", ErrInvalidPolicy, p.Lease, maxLease)
	case p.Lease%time.Millisecond != 0:
		return r, fmt.Errorf("%w: Lease %v is not a whole number of milliseconds (the stores' resolution)", ErrInvalidPolicy, p.Lease)
	case r.cost > p.Limit:
		return r, fmt.Errorf("%w: Cost %d exceeds the capacity %d, so no request could ever be admitted", ErrInvalidPolicy, r.cost, p.Limit)
	}
	leaseMS := p.leaseMS()
	var set quotaSet
	set.n, set.q[0] = 1, quotaSpec{limit: p.Limit, windowMS: leaseMS}
	r.plans = append(r.plans, plan{label: "", sets: [2]quotaSet{set}})
	r.signature = signature(Concurrency, p.Limit, leaseMS, 0)
	return r, nil
}

// leaseMS is the policy's Lease in ms, defaulted.
func (p *Policy) leaseMS() int64 {
	if p.Lease == 0 {
		return DefaultLease.Milliseconds()
	}
	return p.Lease.Milliseconds()
}

// initSlots sets up a Concurrency Limiter on store s (and FailLocal's local
// store): both must be Leasers.
func (l *Limiter) initSlots(s limitstore.Store, cfg *config) error {
	lr, ok := s.(limitstore.Leaser)
	if !ok {
		return fmt.Errorf("%w: Algorithm Concurrency needs a store that keeps slots (limitstore.Leaser); %T does not", ErrInvalidOption, s)
	}
	c := &slots{primary: lr, leaseMS: l.policy.leaseMS()}
	c.renewEvery = time.Duration(c.leaseMS) * time.Millisecond / 3
	if cfg.localStore != nil {
		if c.local, ok = cfg.localStore.(limitstore.Leaser); !ok {
			return fmt.Errorf("%w: Algorithm Concurrency with FailLocal needs a local store that keeps slots (limitstore.Leaser); %T does not", ErrInvalidOption, cfg.localStore)
		}
	}
	if g, ok := cfg.observer.(guardedObserver); ok {
		c.obs, _ = g.o.(SlotObserver)
	}
	_, _ = rand.Read(c.seed[:]) // never fails (crypto/rand)
	c.pool.New = func() any {
		sl := &slot{lim: l, key: make([]byte, 0, 128)}
		sl.timer = time.AfterFunc(time.Hour, sl.renew)
		sl.timer.Stop()
		return sl
	}
	l.conc = c
	return nil
}

// decideSlot is decide for a Concurrency policy: one Acquire of cost slots
// for (bucket, id), the FailureMode on a store failure.
func (l *Limiter) decideSlot(ctx context.Context, bucket *bucketRef, id *who, pl *plan, cost int64, d *Decision) (*quotaSet, error) {
	set := &pl.sets[0]
	if id.src == KeySourceFallback {
		set = &pl.sets[1]
	}
	c := l.conc
	sc := l.scratch.Get().(*scratch)
	op, over, quota := l.op(sc, bucket, id, set, cost)
	*d = Decision{Cost: cost, Bucket: bucket.name, KeySource: id.src, Policy: &l.policy, Plan: pl.label, quota: quota, who: *id, Limit: set.q[0].limit}
	if over {
		l.scratch.Put(sc)
		d.Outcome, d.OverCapacity = OutcomeLimited, true
		return set, nil
	}
	// The slot is filled under its lock (a renewal of its previous hold
	// may still be running) and counts as released until admitted, so
	// that such a renewal never takes a slot for it.
	sl := c.pool.Get().(*slot)
	sl.mu.Lock()
	sl.gen++
	sl.released = true
	sl.key = append(sl.key[:0], op.Quotas[0].Key...)
	sl.op = limitstore.LeaseOp{Key: sl.key, Cost: cost, Limit: set.q[0].limit, LeaseMS: c.leaseMS}
	copy(sl.op.Token[:8], c.seed[:])
	binary.LittleEndian.PutUint64(sl.op.Token[8:], c.seq.Add(1))
	sl.bucket, sl.store = bucket.name, c.primary
	sl.mu.Unlock()
	l.scratch.Put(sc)
	res, err := l.acquire(ctx, c.primary, &sl.op)
	if err != nil {
		d.StoreFailed = true
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			// The Acquire may have run in the store after all: its slots
			// would be held for a whole Lease by no one.
			l.releaseLost(c.primary, &sl.op)
		}
		if callerEnded(ctx, err) {
			// As for a rate quota (storeCall.decide): a caller that went
			// away is admitted by no FailureMode.
			c.pool.Put(sl)
			d.Outcome, d.RetryAfter = OutcomeLimited, failClosedRetryAfter
			return set, err
		}
		local := false
		switch l.store.mode {
		case FailLocal:
			var lerr error
			if res, lerr = l.acquire(ctx, c.local, &sl.op); lerr == nil {
				sl.store, local = c.local, true
				break
			}
			l.store.rep.storeFailure(bucket.name, l.store.mode, lerr, true)
			err = errors.Join(err, fmt.Errorf("limit: FailLocal's local store failed too: %w", lerr))
			d.Allowed, d.Outcome = true, OutcomeDegraded
		case FailOpen:
			d.Allowed, d.Outcome = true, OutcomeDegraded
		case FailClosed:
			d.Outcome, d.RetryAfter = OutcomeLimited, failClosedRetryAfter
		}
		l.store.rep.storeFailure(bucket.name, l.store.mode, err, !errors.Is(err, limitstore.ErrCircuitOpen))
		if !local { // no store holds a slot: nothing to give back
			c.pool.Put(sl)
			return set, err
		}
	}
	d.busy = !res.Allowed
	d.Remaining = max(set.q[0].limit-res.Held, 0)
	if !res.Allowed {
		c.pool.Put(sl)
		d.Outcome, d.RetryAfter = OutcomeLimited, slotRetryAfter
		return set, err
	}
	d.Allowed, d.Outcome = true, OutcomeAllowed
	if d.StoreFailed {
		d.Outcome = OutcomeDegraded // FailLocal's local store holds it
	}
	sl.mu.Lock()
	sl.released = false
	d.slot, d.slotGen = sl, sl.gen
	sl.mu.Unlock()
	sl.timer.Reset(c.renewEvery)
	if c.obs != nil {
		c.obs.Slots(bucket.name, cost)
	}
	return set, err
}

// releaseLost gives back, on a goroutine of its own, the slots of an
// Acquire whose answer never came (its caller's context ended, or the
// store's timeout): the Release carries the Acquire's token, so it frees
// only what that Acquire took, if it ran, and nothing otherwise. A failed
// Release leaves them to the end of their lease, as before.
func (l *Limiter) releaseLost(s limitstore.Leaser, op *limitstore.LeaseOp) {
	lost := *op
	lost.Key = bytes.Clone(op.Key)
	timeout := l.conc.renewEvery
	go func() {
		defer func() { _ = recover() }() // a store that panics: nothing more to do
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		s.Release(ctx, &lost)
	}()
}

// acquire makes one Acquire on s with a recovered panic (a store failure),
// timed when an Observer is set.
func (l *Limiter) acquire(ctx context.Context, s limitstore.Leaser, op *limitstore.LeaseOp) (res limitstore.LeaseResult, err error) {
	var start time.Duration
	if l.store.observing {
		start = l.store.start()
		defer func() { l.store.timed(l.store.primary.name, "acquire", start, err) }()
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limit: store panicked: %v", p)
		}
	}()
	return s.Acquire(ctx, op)
}

// releaseSlot gives back the slots d holds (Finish): one Release, on the
// store that took them, even when ctx is cancelled already (its client
// went away: the values of ctx are kept, its cancellation is not).
func (l *Limiter) releaseSlot(ctx context.Context, d *Decision) {
	sl, gen := d.slot, d.slotGen
	d.slot = nil
	sl.mu.Lock()
	if sl.gen != gen || sl.released {
		sl.mu.Unlock()
		return // a copy of the Decision settled already
	}
	sl.released = true
	sl.timer.Stop()
	sl.mu.Unlock()
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("limit: store panicked: %v", p)
			}
		}()
		var start time.Duration
		if l.store.observing {
			start = l.store.start()
		}
		_, err = sl.store.Release(ctx, &sl.op)
		if l.store.observing {
			l.store.timed(l.store.primary.name, "release", start, err)
		}
	}()
	if err != nil {
		// The slots stay taken until the lease ends (at most Lease).
		l.store.rep.storeFailure(sl.bucket, l.store.mode, err, !errors.Is(err, limitstore.ErrCircuitOpen))
	}
	if c := l.conc; c.obs != nil {
		c.obs.Slots(sl.bucket, -sl.op.Cost)
	}
	l.conc.pool.Put(sl)
}

// renew is the renewal timer's function: one Acquire of the holder's own
// token, which moves its lease's deadline to Lease from now, then the next
// renewal in Lease/3. A store failure is retried at the next tick; a lease
// found lost (it expired and its slots were taken: the store was out of
// reach for a whole Lease) is not taken again, and logged.
func (sl *slot) renew() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.released {
		return
	}
	l := sl.lim
	ctx, cancel := context.WithTimeout(context.Background(), l.conc.renewEvery)
	res, err := l.acquire(ctx, sl.store, &sl.op)
	cancel()
	switch {
	case err != nil:
		l.store.rep.storeFailure(sl.bucket, l.store.mode, err, !errors.Is(err, limitstore.ErrCircuitOpen))
	case !res.Allowed:
		l.cfg.rep.logger.Warn("quotagate: a concurrency slot's lease ended while its request still ran (the store was out of reach for a whole Lease); the request goes on without a slot",
			slog.String("bucket", sl.bucket))
		return
	}
	sl.timer.Reset(l.conc.renewEvery)
}

// serveHeld runs next for a request that holds Concurrency slots and gives
// them back when next returns or panics (the panic goes on up).
func (l *Limiter) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, d *Decision) {
	defer l.Finish(r.Context(), d, 0)
	next.ServeHTTP(w, r)
}
