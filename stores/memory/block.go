package memstore

import (
	"slices"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// blockAlg is the algorithm tag of a block record's entry (Op.Block.Key):
// its words hold UntilMS, LastMS. The key is the record's alone (no quota
// key spells it), so the tag only keeps the entry's layout.
const blockAlg = limit.FixedWindow

// takeBlocked is Take for an Op with a block rule (Op.Block) that is not
// a Refund, or a Refund whose rule keeps unsettled charges
// (Block.LeaseMS > 0): under the locks of the keys' shards (one: the
// block's keys share the quotas' hash tag) it reads the quota States, the
// block record and, with a lease, the unsettled charges (their own entry,
// under Block.PendingKey), decides with limitstore.Op.ApplyBlock and
// writes what it says: the quotas as takeN does (a Refund keeping their
// expiry and creating none), the block record and the charges with their
// times to live (a Refund's charges keeping theirs), each with an eviction
// score of 0: the last entries a full shard gives up. Its answer goes into
// *res.
func (s *Store) takeBlocked(op *limitstore.Op, res *limitstore.Result) {
	n := min(max(op.N, 0), limitstore.MaxQuotas)
	const m = limitstore.MaxQuotas + 2
	k := n + 1 // the records: the block's, and with a lease the charges'
	lease := op.Block.LeaseMS > 0
	if lease {
		k++
	}
	var ids [m]uint64
	var shards [m]int
	for i := range k {
		key := op.Block.Key
		switch {
		case i < n:
			key = op.Quotas[i].Key
		case i == n+1:
			key = op.Block.PendingKey
		}
		ids[i], shards[i] = s.keyID(key), s.shardOf(hashTag(key))
	}
	early := s.early()
	locked := slices.Compact(slices.Sorted(slices.Values(shards[:k])))
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	now := s.at(early, locked)

	var sts [limitstore.MaxQuotas]limitstore.State
	var pos [m]int
	for i := range n {
		q, sh := &op.Quotas[i], &s.shards[shards[i]]
		if pos[i] = sh.find(ids[i]); pos[i] >= 0 && sh.ents[pos[i]].holds(q.Algorithm, now) {
			unpack(&sts[i], q.Algorithm, &sh.ents[pos[i]].w)
			sts[i].Epoch = sh.epochOf(ids[i])
		} else if op.Refund {
			pos[i] = -1 // nothing to refund, and a refund never creates a key
		}
	}
	var b limitstore.BlockState
	bsh := &s.shards[shards[n]]
	if pos[n] = bsh.find(ids[n]); pos[n] >= 0 && bsh.ents[pos[n]].holds(blockAlg, now) {
		w := &bsh.ents[pos[n]].w
		b.UntilMS, b.LastMS = w[0], w[1]
	}
	var psh *shard
	if lease {
		psh = &s.shards[shards[n+1]]
		if pos[n+1] = psh.find(ids[n+1]); pos[n+1] >= 0 && psh.ents[pos[n+1]].holds(blockAlg, now) {
			w := &psh.ents[pos[n+1]].w
			b.Lease, b.Pending, b.PendingPrev = w[0], w[1], w[2]
		} else if op.Refund {
			pos[n+1] = -1 // none to settle, and a refund never creates it
		}
	}
	*res = op.ApplyBlock(&sts, &b, now)

	// Write: entries present first, since adding one may move the others.
	var add [m]bool
	for i := range n {
		q, r, sh := &op.Quotas[i], &res.Quotas[i], &s.shards[shards[i]]
		switch p := pos[i]; {
		case p < 0:
			add[i] = r.TTLMS > 0 && !op.Refund && !writtenLater(ids[:n], i, res)
		case r.TTLMS <= 0:
			if !op.Peek && sh.ents[p].holds(q.Algorithm, now) { // a Peek writes nothing
				sh.ents[p].setScore(r.Remaining, capacityOf(q))
			}
		case op.Refund: // keeps the expiry
			h := &sh.ents[p]
			h.meta = packMeta(q.Algorithm, h.exp(), r.Remaining, capacityOf(q))
			sh.ents[p].w = pack(q.Algorithm, &sts[i])
		default:
			if sts[i].Epoch == 0 {
				sh.forget(ids[i]) // a State decided on none
			}
			sh.set(p, ids[i], entry{packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q)), pack(q.Algorithm, &sts[i])})
		}
	}
	bw := words{b.UntilMS, b.LastMS}
	if res.BlockTTLMS > 0 {
		if p := pos[n]; p >= 0 {
			bsh.forget(ids[n]) // a block record has no epoch
			bsh.set(p, ids[n], entry{packMeta(blockAlg, now+res.BlockTTLMS, 0, 1), bw})
		} else {
			add[n] = true
		}
	}
	pw := words{b.Lease, b.Pending, b.PendingPrev}
	if lease && res.PendingTTLMS > 0 {
		switch p := pos[n+1]; {
		case p >= 0 && op.Refund: // keeps the expiry
			psh.ents[p].w = pw
		case p >= 0:
			psh.forget(ids[n+1]) // nor has the charges'
			psh.set(p, ids[n+1], entry{packMeta(blockAlg, now+res.PendingTTLMS, 0, 1), pw})
		case !op.Refund:
			add[n+1] = true
		}
	}
	for i := range k {
		switch {
		case !add[i]:
		case i == n:
			bsh.add(ids[n], entry{packMeta(blockAlg, now+res.BlockTTLMS, 0, 1), bw}, now, ids[:k])
		case i == n+1:
			psh.add(ids[n+1], entry{packMeta(blockAlg, now+res.PendingTTLMS, 0, 1), pw}, now, ids[:k])
		default:
			q, r := &op.Quotas[i], &res.Quotas[i]
			s.shards[shards[i]].add(ids[i], entry{packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q)), pack(q.Algorithm, &sts[i])}, now, ids[:k])
		}
	}

	cross := s.sweep(shards[0], locked, now)
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	if cross >= 0 {
		s.shards[cross].trySweep(now)
	}
}
