package memstore

import (
	"context"
	"slices"

	"github.com/quotagate/quotagate/engine/limitstore"
)

var _ limitstore.Resetter = (*Store)(nil)

// Reset implements limitstore.Resetter: it removes the entries of keys, all
// under the locks of their shards (one shard for the keys of one identity,
// which share a hash tag; several are locked in index order), so that a
// concurrent Take on any of them runs wholly before or wholly after it. A
// Peek (limitstore.Op.Peek) needs nothing of its own: Take writes what Apply
// says, which for a Peek is nothing. It never fails and never blocks on I/O.
func (s *Store) Reset(_ context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	shards := make([]int, len(keys))
	for i, k := range keys {
		shards[i] = s.shardOf(hashTag(k))
	}
	locked := slices.Compact(slices.Sorted(slices.Values(shards)))
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	for i, k := range keys {
		sh := &s.shards[shards[i]]
		if p := sh.find(s.keyID(k)); p >= 0 {
			sh.heads[p], sh.words[p] = head{}, words{}
			sh.n--
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	return nil
}
