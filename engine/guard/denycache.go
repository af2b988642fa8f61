package guard

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// The local deny cache of a guarded store, shared by every Limiter on the
// wrapper: once the store has denied an Op until
// T, this process denies the same Op (same keys, quotas and cost) itself
// until T, without asking the store, with the numbers the store gave (the
// delays counting down). See docs/decisions for why it never
// admits what the store would deny and never denies what the store would
// admit, refunds apart.
//
// T is conservative: the local monotonic clock read before the store call
// plus the longest RetryAfter of the denying quotas, less the millisecond by
// which the store's truncated clock reading may lag. The store evaluated the
// Op after the call started, and a denial only gets longer with other
// traffic, so the store would still deny the same Op at any instant before
// T. The delays shown count down from the instant the answer arrived, which
// is after the store evaluated, so they are never early.
//
// The table is direct-mapped, denySlots entries indexed by a keyed hash of
// the first quota's key (hash/maphash, a random seed per process, so
// clients cannot aim collisions): a new denial replaces whatever held its
// slot, an expired entry is dropped when it is met, and memory is bounded by
// the table (32 KiB of slots plus at most one ~300-byte entry per slot). A
// slot holds an immutable entry behind an atomic pointer: a hit is one hash
// of the key, one of the quotas, one atomic load and no lock; only a store
// denial allocates (one entry).
const denySlots = 4096

type denyCache struct {
	seed  maphash.Seed
	slots [denySlots]atomic.Pointer[denyEntry]
	// drops counts the calls of drop and dropKeys: a denial whose call
	// began before one (see epoch) may predate a Refund or a Reset that
	// has taken effect since, and is not recorded.
	drops atomic.Uint64
}

type denyEntry struct {
	key0    uint64 // hash of Quotas[0].Key: the slot, and what a refund looks for
	rest    uint64 // hash of the quotas' numbers and the other keys
	cost    int64
	until   int64 // monotonic ns: the cache denies before this instant
	receipt int64 // monotonic ns the store's answer arrived
	res     limitstore.Result
}

func newDenyCache() *denyCache { return &denyCache{seed: maphash.MakeSeed()} }

// A nil *denyCache (a store on an injected clock) answers nothing and
// records nothing.

func (c *denyCache) slot(h uint64) *atomic.Pointer[denyEntry] { return &c.slots[h%denySlots] }

// rest hashes what identifies op besides the first key: every quota's
// algorithm and numbers, the other quotas' keys. Two policies that write one
// key (a Name given to two policies) therefore never answer for each other.
func (c *denyCache) rest(op *limitstore.Op) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	var b [8 * 7]byte
	n := min(max(op.N, 0), limitstore.MaxQuotas)
	for i := range n {
		q := &op.Quotas[i]
		if i > 0 {
			h.Write(q.Key)
		}
		p := binary.LittleEndian.AppendUint64(b[:0], uint64(q.Algorithm))
		p = binary.LittleEndian.AppendUint64(p, uint64(q.Limit))
		p = binary.LittleEndian.AppendUint64(p, uint64(q.WindowMS))
		p = binary.LittleEndian.AppendUint64(p, uint64(q.Burst))
		p = binary.LittleEndian.AppendUint64(p, uint64(q.PhaseMS))
		p = binary.LittleEndian.AppendUint64(p, uint64(q.MaxWaitMS))
		p = binary.LittleEndian.AppendUint64(p, uint64(len(q.Key)))
		h.Write(p)
	}
	// The block rule (Op.Block): a denial of another rule's says nothing.
	h.Write(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(b[:0], uint64(op.Block.ForMS)), uint64(op.Block.MaxMS)))
	return h.Sum64()
}

// lookup returns the store's limitstore.Result for op as of now when the cache denies
// op, with the delays counted down; ok is false when the store must be
// asked: also when op may wait (Op.WaitMS) for a slot the cached delay says
// begins within its wait. An expired entry met on the way is dropped.
func (c *denyCache) lookup(op *limitstore.Op, now int64) (res limitstore.Result, ok bool) {
	if c == nil || op.Refund || op.N < 1 {
		return res, false
	}
	h := maphash.Bytes(c.seed, op.Quotas[0].Key)
	s := c.slot(h)
	e := s.Load()
	if e == nil || e.key0 != h {
		return res, false
	}
	if now >= e.until {
		s.CompareAndSwap(e, nil)
		return res, false
	}
	// A denial for one cost says nothing about another: a cheaper request
	// may be admitted, a dearer one would be shown a Retry-After that may be
	// early. Both ask the store.
	if e.cost != op.Cost || e.rest != c.rest(op) {
		return res, false
	}
	res = e.res
	el := max(now-e.receipt, 0) / int64(1e6) // whole ms, rounded down: delays never early
	res.NowMS += el
	if res.BlockMS > 0 { // a block counts down as the delays do; it began at the store's answer
		res.BlockMS, res.BlockStarted, res.BlockTTLMS = max(res.BlockMS-el, 1), false, 0
	}
	for i := range min(res.N, limitstore.MaxQuotas) {
		q := &res.Quotas[i]
		q.ResetAfterMS = max(q.ResetAfterMS-el, 0)
		if q.RetryAfterMS > 0 {
			q.RetryAfterMS = max(q.RetryAfterMS-el, 1)
		}
		// A request that may wait (Op.WaitMS) for a slot that begins
		// within its wait would be admitted with a reservation: only
		// the store can make it. The delay shown may be up to 2 ms
		// longer than the store's (the countdown rounds down, the
		// store's clock truncates), hence the margin.
		if !q.Allowed && op.WaitMS > 0 && q.RetryAfterMS-2 <= min(op.WaitMS, op.Quotas[i].MaxWaitMS) {
			return limitstore.Result{}, false
		}
	}
	return res, true
}

// epoch is what a store call reads before it begins and passes to store:
// the drops so far.
func (c *denyCache) epoch() uint64 {
	if c == nil {
		return 0
	}
	return c.drops.Load()
}

// store records the store's denial of op: start is the monotonic instant
// read before the call, receipt the one after it, epoch the cache's epoch
// before the call. Admissions, refunds, denials without a RetryAfter, and
// denials of a call that a drop (a Refund or a Reset through this cache)
// overlapped are not recorded: the store may have decided before the
// Refund or the Reset took effect, and its denial may no longer hold.
func (c *denyCache) store(op *limitstore.Op, res *limitstore.Result, start, receipt int64, epoch uint64) {
	if c == nil || op.Refund || res.Allowed || op.N < 1 || c.drops.Load() != epoch {
		return
	}
	var retry int64
	for i := range min(res.N, limitstore.MaxQuotas) {
		if q := &res.Quotas[i]; !q.Allowed {
			retry = max(retry, q.RetryAfterMS)
		}
	}
	retry = max(retry, res.BlockMS) // a block (Op.Block) denies until it ends, whatever the quotas say
	if retry <= 0 {
		return
	}
	// The store reads its clock in whole milliseconds, truncated: its "now"
	// may be up to 1 ms behind the instant it evaluated, and so may the
	// instant it would admit again. Hence one millisecond less.
	h := maphash.Bytes(c.seed, op.Quotas[0].Key)
	c.slot(h).Store(&denyEntry{key0: h, rest: c.rest(op), cost: op.Cost,
		until: start + (retry-1)*int64(1e6), receipt: receipt, res: *res})
}

// drop forgets every entry whose first key is a key of op (a refund gives
// quota back, so a denial recorded before it may end sooner than its T).
func (c *denyCache) drop(op *limitstore.Op) {
	if c == nil {
		return
	}
	c.drops.Add(1)
	for i := range min(max(op.N, 0), limitstore.MaxQuotas) {
		h := maphash.Bytes(c.seed, op.Quotas[i].Key)
		s := c.slot(h)
		if e := s.Load(); e != nil && e.key0 == h {
			s.CompareAndSwap(e, nil)
		}
	}
}

// dropKeys drops the cached denials whose first key is one of keys (a
// Reset's).
func (c *denyCache) dropKeys(keys [][]byte) {
	if c == nil {
		return
	}
	c.drops.Add(1)
	for _, k := range keys {
		h := maphash.Bytes(c.seed, k)
		s := c.slot(h)
		if e := s.Load(); e != nil && e.key0 == h {
			s.CompareAndSwap(e, nil)
		}
	}
}
