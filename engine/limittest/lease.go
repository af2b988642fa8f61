package limittest

import (
	"context"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// lease is one holder's slots in the reference Store.
type lease struct {
	n        int64
	deadline int64 // Unix ms; counts while > now
}

var _ limitstore.Leaser = (*Store)(nil)

// Acquire implements limitstore.Leaser, word for word as its contract says,
// under the store's one lock.
func (s *Store) Acquire(_ context.Context, op *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	now := s.now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	set := s.lease[string(op.Key)]
	res := limitstore.LeaseResult{NowMS: now}
	for tok, l := range set {
		if l.deadline <= now {
			delete(set, tok)
			continue
		}
		res.Held += l.n
	}
	if l, ok := set[op.Token]; ok {
		l.deadline = now + op.LeaseMS
		set[op.Token] = l
		res.Allowed = true
		return res, nil
	}
	if op.Cost < 1 || res.Held+op.Cost > op.Limit {
		return res, nil
	}
	if set == nil {
		if s.lease == nil {
			s.lease = map[string]map[[limitstore.TokenSize]byte]lease{}
		}
		set = map[[limitstore.TokenSize]byte]lease{}
		s.lease[string(op.Key)] = set
	}
	set[op.Token] = lease{n: op.Cost, deadline: now + op.LeaseMS}
	res.Allowed, res.Held = true, res.Held+op.Cost
	return res, nil
}

// Release implements limitstore.Leaser: it removes op.Token's lease and
// reports whether it still held its slots.
func (s *Store) Release(_ context.Context, op *limitstore.LeaseOp) (bool, error) {
	now := s.now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	set := s.lease[string(op.Key)]
	l, ok := set[op.Token]
	if !ok {
		return false, nil
	}
	delete(set, op.Token)
	if len(set) == 0 {
		delete(s.lease, string(op.Key))
	}
	return l.deadline > now, nil
}

// Held returns the slots held under key at the store's clock.
func (s *Store) Held(key string) (n int64) {
	now := s.now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lease[key] {
		if l.deadline > now {
			n += l.n
		}
	}
	return n
}
