package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

// Group commit (docs/DESIGN.md, "Group commit").
//
// Every EVALSHA costs Redis its networking, parsing and script call (about
// 9 µs on the machine measured) before the script does any work, and
// Redis's one thread is the fleet's ceiling. So concurrent Takes share
// calls: at most maxFlights script calls of a Store are out at once; a
// Take that finds a slot free (and nobody queued) sends its Op at once,
// alone, with takeScript (a batch of one is the plain call: at low load
// nothing waits), and otherwise queues. When a call returns and Takes are
// queued, the slot passes to a runner goroutine that sends the queue's head
// (up to maxBatchOps Ops, maxBatchBytes bytes) as one EVALSHA of
// batchScript (takeScript for one Op) and repeats while Takes are queued;
// it ends when the queue is empty, so a Store has no runner while idle.
// Redis runs a script atomically and batchScript decides its Ops one after
// the other, in arrival order, each as takeScript would: the decisions are
// those of the same Takes sent one by one in that order, an order the
// concurrent callers could have had anyway.
//
// Takes are queued only behind calls out; when every call out is slow (a
// distant or stalled server), a Take with a deadline waits at most
// flushAfter (1 ms) before one more call takes the queue (the flush timer,
// armFlush), so a slow link keeps its throughput.
//
// A caller returns when its own context is done, queued or not: a queued
// Op is taken out of the queue and never sent (nothing charged), and a
// flight leaves out every queued Op whose context is done before its caller
// noticed (fill); an Op already sent may be charged, as a timed-out call
// always could. A flight
// runs under its own context (flight): the latest deadline of its
// members, done only when every member has given up, so no member's
// cancellation fails the others.
//
// Cluster: a script may touch one hash slot only, and the Ops of a flight
// have no common slot, so a Cluster client is never batched (one call per
// decision, as before); standalone and Sentinel clients are.

const (
	// maxFlights is the number of script calls of one Store out at once
	// before Takes queue (measured with bench/redispeers: DESIGN.md).
	maxFlights = 2
	// maxBatchOps and maxBatchBytes bound one flight: its Ops, and the
	// bytes of their keys and arguments (an Op alone may exceed it).
	maxBatchOps   = 64
	maxBatchBytes = 64 << 10
	// maxBatchKeys bounds a flight's keys (each Op's counted): batch.lua
	// indexes them with one byte.
	maxBatchKeys = 255
	// flushAfter is the longest a queued Take waits while every call out
	// is slow before one more call takes it (armFlush).
	flushAfter = time.Millisecond
)

// Waiter states (guarded by batcher.mu).
const (
	idle      = iota // not queued: pooled, or a plain call's
	queued           // in batcher.queue
	sent             // taken by a flight, answer pending
	answered         // reply and err set, ready signalled
	abandoned        // its caller gave up while its flight was out
)

// waiter is one Take: its Op's keys and argument, encoded, and where the
// answer of its flight goes. Pooled; a waiter whose flight may still write
// to it (abandoned) is left to the garbage collector.
type waiter struct {
	buf   []byte                    // the keys, then the argument
	ends  [limitstore.MaxQuotas]int // the end of each key in buf
	n     int                       // keys
	phase int64                     // a window Op's phase, sent in a flight's head; -1: none (argument sent whole)
	ready chan struct{}             // capacity 1: signalled once answered
	dl    time.Time                 // the caller's deadline,
	hasDL bool                      // if it has one
	ctx   context.Context           // the caller's context while queued
	state int                       // guarded by batcher.mu
	f     *flight                   // the flight it was sent in (sent, abandoned)
	r     int64                     // its answer: the clock reading (Unix ms), negated when denied,
	reply string                    // and the states its Op read (decideStates),
	err   error                     // or the flight's or its own error
}

// newWaiter is the New of a Store's waiter pool (batcher.waiters).
func newWaiter() any {
	return &waiter{buf: make([]byte, 0, 256), ready: make(chan struct{}, 1)}
}

// encode writes op's keys and its argument (little-endian 64-bit integers,
// see lua/take.lua) into w.buf; now is the caller's clock in Unix ms, 0 for
// the server's TIME.
func (w *waiter) encode(op *limitstore.Op, now int64) {
	buf := w.buf[:0]
	n := op.N
	for i := range n {
		buf = append(buf, op.Quotas[i].Key...)
		w.ends[i] = len(buf)
	}
	w.n = n
	w.phase = -1
	if q := &op.Quotas[0]; n == 1 && !op.Refund && q.Algorithm != limit.TokenBucket && q.PhaseMS >= 0 && q.PhaseMS < 1<<32 {
		w.phase = q.PhaseMS
	}
	buf = binary.LittleEndian.AppendUint64(buf, uint64(now))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(op.Cost))
	for i := range n {
		q := &op.Quotas[i]
		x := q.PhaseMS
		if q.Algorithm == limit.TokenBucket {
			x = q.Burst
		}
		buf = binary.LittleEndian.AppendUint64(buf, uint64(quotaCode(op, q)))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(q.Limit))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(q.WindowMS))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
		if op.Refund {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(q.Window))
			buf = binary.LittleEndian.AppendUint64(buf, uint64(q.Epoch))
		}
	}
	w.buf = buf
}

// batcher is a Store's group commit state.
type batcher struct {
	mu    sync.Mutex
	out   int       // script calls out (plain calls and flights)
	queue []*waiter // in arrival order; non-empty only while calls are out
	free  []*flight // runners' flights, reused

	waiters sync.Pool // *waiter: each Take's buffers (newWaiter)

	timer  *time.Timer    // the flush timer (armFlush)
	armed  bool           // timer set and not yet fired
	done   time.Time      // when a script call last returned within maxFlights (zero: none yet)
	client rueidis.Client // the client of the queued Takes, for flush
}

// flight is one batched script call: its members and buffers, reused by
// the runners (a buffer rueidis may still be writing is dropped instead).
// It is the call's context.Context.
type flight struct {
	members []*waiter
	buf     []byte
	keys    []string
	args    []string
	// During send: a key's index in keys, an argument's in args.
	keyIndex, argIndex map[string]byte
	rs                 []int64  // per member: its answer's clock reading (waiter.r),
	parts              []string // the states its Op read,
	errs               []error  // or its error
	live               int      // members still waiting (guarded by batcher.mu)

	// The context's state: atomic, since a rueidis goroutine may look at
	// the context after the call returned (see the engine's storeCtx).
	done     atomic.Pointer[chan struct{}]
	dl       atomic.Int64 // Unix ns; 0: no deadline
	canceled atomic.Bool  // done is closed: the next flight needs a new one
}

var _ context.Context = (*flight)(nil)

// Deadline is the latest of the members' deadlines (none if one has none).
func (f *flight) Deadline() (time.Time, bool) {
	if ns := f.dl.Load(); ns != 0 {
		return time.Unix(0, ns), true
	}
	return time.Time{}, false
}

// Done is closed when every member has given up.
func (f *flight) Done() <-chan struct{} { return *f.done.Load() }

// Err is context.Canceled once every member has given up.
func (f *flight) Err() error {
	select {
	case <-f.Done():
		return context.Canceled
	default:
		return nil
	}
}

// Value is nil: the members' contexts may be gone by the time a client
// asks (the engine's are reused once its Take returned).
func (f *flight) Value(any) any { return nil }

// batches reports whether calls through c may be combined: not on a
// Cluster (one hash slot per script).
func batches(c rueidis.Client) bool { return c.Mode() != rueidis.ClientModeCluster }

// take runs one Take through the group commit: at once when a slot is
// free, else queued for the next flight.
func (s *Store) take(ctx context.Context, c rueidis.Client, op *limitstore.Op, w *waiter) (limitstore.Result, error) {
	b := &s.batch
	b.mu.Lock()
	if b.out < maxFlights && len(b.queue) == 0 {
		b.out++
		b.mu.Unlock()
		res, err := s.call(ctx, c, op, w)
		b.mu.Lock()
		if s.keepSlot() {
			go s.run(c, b.flight())
		}
		b.mu.Unlock()
		return res, err
	}
	if s.closed.Load() { // Close has drained the queue, or will not see w
		b.mu.Unlock()
		s.batch.waiters.Put(w)
		return limitstore.Result{}, ErrClosed
	}
	if err := ctx.Err(); err != nil { // given up already: never queued, never sent
		b.mu.Unlock()
		s.batch.waiters.Put(w)
		return limitstore.Result{}, err
	}
	w.dl, w.hasDL = ctx.Deadline()
	w.ctx = ctx
	w.state = queued
	b.queue = append(b.queue, w)
	b.client = c
	if w.hasDL {
		s.armFlush()
	}
	b.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		b.mu.Lock()
		switch w.state {
		case queued: // never sent: nothing charged
			if i := slices.Index(b.queue, w); i >= 0 {
				b.queue = slices.Delete(b.queue, i, i+1)
			}
			w.state, w.ctx = idle, nil
			b.mu.Unlock()
			s.batch.waiters.Put(w)
			return limitstore.Result{}, ctx.Err()
		case sent: // its flight may still write to w: not pooled
			w.state = abandoned
			f := w.f
			if f.live--; f.live == 0 {
				f.canceled.Store(true)
				close(*f.done.Load())
			}
			b.mu.Unlock()
			return limitstore.Result{}, ctx.Err()
		}
		b.mu.Unlock() // answered meanwhile
		<-w.ready
	}
	r, reply, err := w.r, w.reply, w.err
	w.state, w.f, w.r, w.reply, w.err = idle, nil, 0, "", nil
	s.batch.waiters.Put(w)
	if err != nil {
		return limitstore.Result{}, err
	}
	return decideStates(op, r, reply)
}

// call sends w's Op alone (takeScript) under the caller's ctx. w goes back
// to the pool once Redis answered: until then rueidis may still be writing
// the command (a call whose deadline expired is abandoned in the pipeline,
// not recalled), so a failed call's buffer is left to the garbage
// collector.
func (s *Store) call(ctx context.Context, c rueidis.Client, op *limitstore.Op, w *waiter) (limitstore.Result, error) {
	str := rueidis.BinaryString(w.buf)
	var keys [limitstore.MaxQuotas]string
	from := 0
	for i := range w.n {
		keys[i], from = str[from:w.ends[i]], w.ends[i]
	}
	args := [1]string{str[from:]}
	resp := takeScript.Exec(ctx, c, keys[:w.n], args[:])
	res, err := decide(op, resp)
	if resp.NonRedisError() == nil {
		s.batch.waiters.Put(w)
	}
	return res, err
}

// keepSlot is called when a script call returns, b.mu held: it keeps the
// call's slot for a runner when Takes are queued (true), or gives it back
// (false); a slot above maxFlights (a flush's) is given back, the queue
// then left to the other runners and the flush timer.
func (s *Store) keepSlot() bool {
	b := &s.batch
	if b.out <= maxFlights {
		// A return that takes the queue (flush waits for such one): a
		// slot above maxFlights is given back, taking nothing.
		b.done = time.Now()
	}
	if len(b.queue) > 0 && !s.closed.Load() && b.out <= maxFlights {
		return true
	}
	b.out--
	if len(b.queue) > 0 && !s.closed.Load() {
		s.armFlush()
	}
	return false
}

// flight returns a flight to fill; b.mu is held.
func (b *batcher) flight() *flight {
	if k := len(b.free); k > 0 {
		f := b.free[k-1]
		b.free = b.free[:k-1]
		return f
	}
	f := &flight{}
	ch := make(chan struct{})
	f.done.Store(&ch)
	return f
}

// armFlush makes sure a queued Take with a deadline waits at most
// flushAfter before a flight takes it, even when every call out is slow (a
// distant or slowed server: waiting for a call to return would spend a
// whole round trip more of the queued Takes' time); b.mu is held. A Take
// without a deadline has no time to lose: it waits for a call to return.
// The timer is the Store's one, made on first use; it starts a goroutine
// only when it fires. It is never stopped, only left to fire (a queue
// emptied meanwhile makes flush a no-op): stopping and setting it again
// per flight made the runtime scan its timer heap each time, which holds a
// timer per millisecond of the store timeout (the guard's shared
// deadlines).
func (s *Store) armFlush() {
	b := &s.batch
	if b.armed {
		return
	}
	b.armed = true
	if b.timer == nil {
		b.timer = time.AfterFunc(flushAfter, s.flush)
		return
	}
	b.timer.Reset(flushAfter)
}

// flush runs when the flush timer fires: Takes have been queued for
// flushAfter. When no script call has returned for flushAfter, every call
// out is slow, so one more call (above maxFlights) takes them, from this
// goroutine. When one has, the calls out are answering and the next to
// return takes the queue: the timer is set again for flushAfter after that
// return. (A Redis merely busy keeps answering: an extra call would only
// split its flights, costing Redis and the client more per decision;
// measured with bench/redispeers, DESIGN.md.)
func (s *Store) flush() {
	b := &s.batch
	b.mu.Lock()
	b.armed = false
	if len(b.queue) == 0 || s.closed.Load() {
		s.failQueued(ErrClosed) // none unless closed
		b.mu.Unlock()
		return
	}
	if wait := flushAfter - time.Since(b.done); !b.done.IsZero() && wait > 0 {
		b.armed = true
		b.timer.Reset(wait)
		b.mu.Unlock()
		return
	}
	b.out++
	f, c := b.flight(), b.client
	b.mu.Unlock()
	s.run(c, f)
}

// run sends the queued Ops, a flight at a time, while Takes are queued,
// then gives its slot back.
func (s *Store) run(c rueidis.Client, f *flight) {
	b := &s.batch
	for {
		b.mu.Lock()
		if len(b.queue) == 0 || s.closed.Load() {
			s.failQueued(ErrClosed) // none unless closed
			b.out--
			b.free = append(b.free, f)
			b.mu.Unlock()
			return
		}
		f.fill(b)
		if len(b.queue) > 0 { // more than a flight: the rest waits at most flushAfter too
			s.armFlush()
		}
		b.mu.Unlock()
		if len(f.members) == 0 { // every Op taken had given up
			continue
		}
		s.send(c, f)
		f.members = f.members[:0]
		b.mu.Lock()
		keep := s.keepSlot()
		if !keep {
			b.free = append(b.free, f)
		}
		b.mu.Unlock()
		if !keep {
			return
		}
	}
}

// fill takes the queue's head into f and prepares f's context; b.mu is
// held. A queued Take whose context is done (its caller has not noticed
// yet) is answered with the context's error instead of being sent: a Take
// that gave up while queued is never charged, however late its goroutine
// runs (Store.Take's promise).
func (f *flight) fill(b *batcher) {
	if f.canceled.Load() {
		ch := make(chan struct{})
		f.done.Store(&ch)
		f.canceled.Store(false)
	}
	var latest time.Time
	forever, size, k, nk, taken := false, 0, 0, 0, 0
	for _, w := range b.queue {
		if k == maxBatchOps || (k > 0 && (size+len(w.buf) > maxBatchBytes || nk+w.n > maxBatchKeys)) {
			break
		}
		taken++
		ctx := w.ctx
		w.ctx = nil
		if err := ctx.Err(); err != nil {
			w.err, w.state = err, answered
			w.ready <- struct{}{}
			continue
		}
		size += len(w.buf)
		nk += w.n
		k++
		w.state, w.f = sent, f
		f.members = append(f.members, w)
		if !w.hasDL {
			forever = true
		} else if w.dl.After(latest) {
			latest = w.dl
		}
	}
	n := copy(b.queue, b.queue[taken:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	f.live = k
	if forever {
		f.dl.Store(0)
	} else {
		f.dl.Store(latest.UnixNano())
	}
}

// send makes f's script call and hands each member its part of the
// reply: the Op's reply, or its own error (a WRONGTYPE key), or the call's
// error.
func (s *Store) send(c rueidis.Client, f *flight) {
	var resp rueidis.RedisResult
	buf := f.buf[:0]
	if len(f.members) == 1 { // a batch of one is the plain call
		w := f.members[0]
		buf = append(buf, w.buf...)
		str := rueidis.BinaryString(buf)
		keys, from := f.keys[:0], 0
		for i := range w.n {
			keys, from = append(keys, str[from:w.ends[i]]), w.ends[i]
		}
		f.keys, f.args = keys, append(f.args[:0], str[from:])
		resp = takeScript.Exec(f, c, f.keys, f.args)
	} else {
		// KEYS: each key once; ARGV[2] on: each argument once (a window
		// Op's without its phase); ARGV[1]: per Op n, the index in ARGV of
		// its argument, the indexes in KEYS of its keys, its phase in 4
		// bytes (lua/batch.lua). The arguments and keys are copied
		// after ARGV[1] into buf: rueidis may still be writing the command
		// after a failed call, when the members' buffers are reused.
		if f.keyIndex == nil {
			f.keyIndex = make(map[string]byte, maxBatchKeys)
			f.argIndex = make(map[string]byte, maxBatchOps)
		}
		keys, args := f.keys[:0], append(f.args[:0], "")
		var prev string // the previous Op's argument, at ARGV index px
		var px byte
		for _, w := range f.members {
			arg := rueidis.BinaryString(w.buf[w.ends[w.n-1]:])
			var ph uint32
			if w.phase >= 0 { // a window Op: its phase goes in its head, its argument without it
				arg, ph = arg[:len(arg)-8], uint32(w.phase)
			}
			x, ok := px, px != 0 && arg == prev // Ops of one policy share it: no map lookup
			if !ok {
				if x, ok = f.argIndex[arg]; !ok {
					args = append(args, arg)
					x = byte(len(args))
					f.argIndex[arg] = x
				}
				prev, px = arg, x
			}
			buf = append(buf, byte(w.n), x)
			from := 0
			for i := range w.n {
				k := rueidis.BinaryString(w.buf[from:w.ends[i]])
				from = w.ends[i]
				if x, ok = f.keyIndex[k]; !ok {
					keys = append(keys, k)
					x = byte(len(keys))
					f.keyIndex[k] = x
				}
				buf = append(buf, x)
			}
			buf = binary.LittleEndian.AppendUint32(buf, ph)
		}
		clear(f.keyIndex)
		clear(f.argIndex)
		markAgain(buf, f.members)
		end := len(buf)
		for _, a := range args[1:] {
			buf = append(buf, a...)
		}
		for _, k := range keys {
			buf = append(buf, k...)
		}
		str := rueidis.BinaryString(buf)
		args[0] = str[:end]
		from := end
		for i, a := range args[1:] {
			args[i+1], from = str[from:from+len(a)], from+len(a)
		}
		for i, k := range keys {
			keys[i], from = str[from:from+len(k)], from+len(k)
		}
		f.keys, f.args = keys, args
		resp = batchScript.Exec(f, c, f.keys, f.args)
	}
	reply, err := resp.ToString()
	if resp.NonRedisError() == nil {
		f.buf = buf // answered: rueidis is done with the command
	} else {
		f.buf = nil
	}
	rs, parts, errs := f.rs[:0], f.parts[:0], f.errs[:0]
	for range f.members {
		rs, parts, errs = append(rs, 0), append(parts, ""), append(errs, err)
	}
	if err == nil {
		if len(f.members) == 1 { // take.lua's reply
			rs[0], parts[0], errs[0] = splitTake(reply, f.members[0].n)
		} else if err = splitBatch(reply, f.members, rs, parts, errs); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
	}
	b := &s.batch
	b.mu.Lock()
	for i, w := range f.members {
		if w.state == sent {
			w.r, w.reply, w.err, w.state = rs[i], parts[i], errs[i], answered
			w.ready <- struct{}{}
		}
	}
	b.mu.Unlock()
	clear(f.members)
	clear(parts)
	clear(errs)
	f.rs, f.parts, f.errs = rs, parts, errs
}

// headAgain is the flag of an Op's head byte n (lua/batch.lua): the Op has
// one quota and a later Op of the flight reads its key, so its write must
// leave the whole value where that Op will read it.
const headAgain = 0x80

// markAgain sets headAgain in the heads (ARGV[1], buf) of the members of
// one quota whose key a later member reads too.
func markAgain(buf []byte, members []*waiter) {
	var uses [maxBatchKeys + 1]uint16 // reads of each key index (up to maxBatchOps x MaxQuotas)
	p := 0
	for _, w := range members {
		for _, x := range buf[p+2 : p+2+w.n] {
			uses[x]++
		}
		p += 6 + w.n
	}
	p = 0
	for _, w := range members {
		for _, x := range buf[p+2 : p+2+w.n] {
			uses[x]--
		}
		if w.n == 1 && uses[buf[p+2]] > 0 {
			buf[p] |= headAgain
		}
		p += 6 + w.n
	}
}

// splitBatch cuts a batch reply (see lua/batch.lua) into its members'
// answers: rs[i] and parts[i] (see waiter.r and waiter.reply), or errs[i],
// the Op's own error (a WRONGTYPE key). A reply of the wrong shape is
// ErrBadReply, for every member.
func splitBatch(s string, members []*waiter, rs []int64, parts []string, errs []error) error {
	k := len(members)
	if len(s) < 1 || len(s) < 1+2*int(s[0])+8 {
		return fmt.Errorf("%w: a batch reply of %d bytes for %d Ops", ErrBadReply, len(s), k)
	}
	m := int(s[0])
	odd, tnow, rest := s[1:1+2*m], le64(s, 1+2*m), s[1+2*m+8:]
	for i, w := range members {
		kind := byte(0) // admitted
		if len(odd) > 0 && int(odd[0]) == i {
			kind, odd = odd[1], odd[2:]
		}
		switch kind {
		case 0, 1: // admitted, denied: the states read
			l := replyStateLen * w.n
			if len(rest) < l {
				return fmt.Errorf("%w: a batch part of %d bytes, %d left", ErrBadReply, l, len(rest))
			}
			now := le64(rueidis.BinaryString(w.buf), w.ends[w.n-1]) // the clock sent, 0: the server's
			if now == 0 {
				now = tnow
			}
			if kind == 1 {
				now = -now
			}
			rs[i], parts[i], errs[i], rest = now, rest[:l], nil, rest[l:]
		case 2: // the Op's error: a little-endian 16-bit length, the message
			if len(rest) < 2 || len(rest) < 2+(int(rest[0])|int(rest[1])<<8) {
				return fmt.Errorf("%w: a batch error cut short (%d bytes left)", ErrBadReply, len(rest))
			}
			l := int(rest[0]) | int(rest[1])<<8
			errs[i], rest = fmt.Errorf("redisstore: %s", rest[2:2+l]), rest[2+l:]
		default:
			return fmt.Errorf("%w: a batch part of kind %d", ErrBadReply, kind)
		}
	}
	if len(odd) > 0 {
		return fmt.Errorf("%w: a batch reply's odd Op %d of %d", ErrBadReply, odd[0], k)
	}
	if rest != "" {
		return fmt.Errorf("%w: %d bytes after the last Op's reply", ErrBadReply, len(rest))
	}
	return nil
}

// failQueued answers every queued Take with err; b.mu is held.
func (s *Store) failQueued(err error) {
	b := &s.batch
	for _, w := range b.queue {
		w.err, w.state, w.ctx = err, answered, nil
		w.ready <- struct{}{}
	}
	clear(b.queue)
	b.queue = b.queue[:0]
}
