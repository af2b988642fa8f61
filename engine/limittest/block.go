package limittest

import "github.com/quotagate/quotagate/engine/limitstore"

// applyBlock is Op.ApplyBlock on the States read and the block record
// under op.Block.Key (an entry whose State holds UntilMS in Window and
// LastMS in Count), writing the record when the Result says so; s.mu is
// held.
func (s *Store) applyBlock(op *limitstore.Op, sts *[limitstore.MaxQuotas]limitstore.State, now int64) limitstore.Result {
	if op.Block.ForMS <= 0 || op.Refund {
		return op.Apply(sts, now)
	}
	var b limitstore.BlockState
	e := s.m[string(op.Block.Key)]
	if e != nil && e.exp > now {
		b = limitstore.BlockState{UntilMS: e.st.Window, LastMS: e.st.Count}
	}
	res := op.ApplyBlock(sts, &b, now)
	if res.BlockTTLMS > 0 {
		if e == nil {
			k := string(op.Block.Key)
			e = new(entry)
			s.m[k] = e
			s.keys = append(s.keys, k)
		}
		e.st, e.exp = limitstore.State{Window: b.UntilMS, Count: b.LastMS}, now+res.BlockTTLMS
	}
	return res
}
