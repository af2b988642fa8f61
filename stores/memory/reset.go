package memstore

import (
	"context"
	"slices"

	"github.com/quotagate/quotagate/engine/limitstore"
)

var _ limitstore.Resetter = (*Store)(nil)

// Reset implements limitstore.Resetter, all under the locks of the keys'
// shards (one shard for the keys of one identity, which share a hash tag;
// several are locked in index order), so that a concurrent Take on any of
// them runs wholly before or wholly after it: a live entry's State becomes
// the empty State of the next epoch, keeping its expiry (a block record's
// becomes the zero record, none), and an expired one is removed. A Peek
// (limitstore.Op.Peek) needs nothing of its own: Take writes what Apply
// says, which for a Peek is nothing. It never fails and never blocks on
// I/O.
func (s *Store) Reset(_ context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	shards := make([]int, len(keys))
	for i, k := range keys {
		shards[i] = s.shardOf(hashTag(k))
	}
	early := s.early()
	locked := slices.Compact(slices.Sorted(slices.Values(shards)))
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	now := s.at(early, locked)
	for i, k := range keys {
		sh := &s.shards[shards[i]]
		id := s.keyID(k)
		p := sh.find(id)
		switch {
		case p < 0:
		case sh.ents[p].exp() > now:
			if sh.epochs == nil {
				sh.epochs = map[uint64]int64{}
			}
			sh.epochs[id]++
			sh.ents[p].w = words{}
			sh.ents[p].setScore(1, 1) // a whole quota
		default:
			sh.forget(id)
			sh.clearSlot(p)
			sh.n--
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	return nil
}
