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

// takeBlocked is Take for an Op with a block rule (Op.Block, not a
// Refund): under the locks of the keys' shards (one: the block key shares
// the quotas' hash tag) it reads the quota States and the block record,
// decides with limitstore.Op.ApplyBlock and writes what it says: the
// quotas as takeN does, and the block record with its time to live (an
// eviction score of 0: the last entry a full shard gives up).
func (s *Store) takeBlocked(op *limitstore.Op) limitstore.Result {
	n := min(max(op.N, 0), limitstore.MaxQuotas)
	const m = limitstore.MaxQuotas + 1
	var ids [m]uint64
	var shards [m]int
	for i := range n + 1 {
		key := op.Block.Key
		if i < n {
			key = op.Quotas[i].Key
		}
		ids[i], shards[i] = s.keyID(key), s.shardOf(hashTag(key))
	}
	locked := slices.Compact(slices.Sorted(slices.Values(shards[:n+1])))
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	now := s.nowMS() // under the locks: see nowMS

	var sts [limitstore.MaxQuotas]limitstore.State
	var pos [m]int
	for i := range n {
		q, sh := &op.Quotas[i], &s.shards[shards[i]]
		if pos[i] = sh.find(ids[i]); pos[i] >= 0 && sh.heads[pos[i]].holds(q.Algorithm, now) {
			unpack(&sts[i], q.Algorithm, &sh.words[pos[i]])
			sts[i].Epoch = sh.epochOf(ids[i])
		}
	}
	var b limitstore.BlockState
	bsh := &s.shards[shards[n]]
	if pos[n] = bsh.find(ids[n]); pos[n] >= 0 && bsh.heads[pos[n]].holds(blockAlg, now) {
		w := &bsh.words[pos[n]]
		b = limitstore.BlockState{UntilMS: w[0], LastMS: w[1]}
	}
	res := op.ApplyBlock(&sts, &b, now)

	// Write: entries present first, since adding one may move the others.
	var add [m]bool
	for i := range n {
		q, r, sh := &op.Quotas[i], &res.Quotas[i], &s.shards[shards[i]]
		switch p := pos[i]; {
		case r.TTLMS <= 0:
			if p >= 0 && !op.Peek && sh.heads[p].holds(q.Algorithm, now) { // a Peek writes nothing
				sh.heads[p].setScore(r.Remaining, capacityOf(q))
			}
		case p >= 0:
			if sts[i].Epoch == 0 {
				sh.forget(ids[i]) // a State decided on none
			}
			sh.heads[p] = head{ids[i], packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q))}
			sh.words[p] = pack(q.Algorithm, &sts[i])
			sh.wrote(sh.heads[p].exp())
		default:
			add[i] = !slices.Contains(ids[:i], ids[i])
		}
	}
	bw := words{b.UntilMS, b.LastMS}
	if res.BlockTTLMS > 0 {
		if p := pos[n]; p >= 0 {
			bsh.forget(ids[n]) // a block record has no epoch
			bsh.heads[p], bsh.words[p] = head{ids[n], packMeta(blockAlg, now+res.BlockTTLMS, 0, 1)}, bw
			bsh.wrote(bsh.heads[p].exp())
		} else {
			add[n] = true
		}
	}
	for i := range n + 1 {
		if !add[i] {
			continue
		}
		if i == n {
			bsh.add(head{ids[n], packMeta(blockAlg, now+res.BlockTTLMS, 0, 1)}, bw, now, ids[:n+1])
			continue
		}
		q, r := &op.Quotas[i], &res.Quotas[i]
		s.shards[shards[i]].add(head{ids[i], packMeta(q.Algorithm, now+r.TTLMS, r.Remaining, capacityOf(q))}, pack(q.Algorithm, &sts[i]), now, ids[:n+1])
	}

	cross := s.sweep(shards[0], locked, now)
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	if cross >= 0 {
		s.shards[cross].trySweep(now)
	}
	return res
}
