package limittest

import "github.com/quotagate/quotagate/engine/limitstore"

// applyBlock is Op.ApplyBlock on the States read, the block record under
// op.Block.Key (an entry whose State holds UntilMS in Window and LastMS in
// Count) and, with a lease, the unsettled charges under
// op.Block.PendingKey (Lease in Window, Pending in Count, PendingPrev in
// Prev), writing each record when the Result says so (a Refund's charges
// keeping their expiry, and never created), its answer into *res; s.mu
// is held.
func (s *Store) applyBlock(op *limitstore.Op, sts *[limitstore.MaxQuotas]limitstore.State, now int64, res *limitstore.Result) {
	lease := op.Block.LeaseMS > 0
	if op.Block.ForMS <= 0 || op.Refund && !lease {
		op.ApplyTo(res, sts, now)
		return
	}
	var b limitstore.BlockState
	e := s.live(op.Block.Key, now)
	if e != nil {
		b.UntilMS, b.LastMS = e.st.Window, e.st.Count
	}
	var pe *entry
	if lease {
		if pe = s.live(op.Block.PendingKey, now); pe != nil {
			b.Lease, b.Pending, b.PendingPrev = pe.st.Window, pe.st.Count, pe.st.Prev
		}
	}
	*res = op.ApplyBlock(sts, &b, now)
	if res.BlockTTLMS > 0 {
		e = s.entryOf(op.Block.Key, e)
		e.st, e.exp = limitstore.State{Window: b.UntilMS, Count: b.LastMS}, now+res.BlockTTLMS
	}
	switch {
	case res.PendingTTLMS <= 0:
	case op.Refund:
		if pe != nil {
			pe.st = limitstore.State{Window: b.Lease, Count: b.Pending, Prev: b.PendingPrev}
		}
	default:
		pe = s.entryOf(op.Block.PendingKey, pe)
		pe.st, pe.exp = limitstore.State{Window: b.Lease, Count: b.Pending, Prev: b.PendingPrev}, now+res.PendingTTLMS
	}
}

// live returns the entry under key when it is live at now, else nil.
func (s *Store) live(key []byte, now int64) *entry {
	if e := s.m[string(key)]; e != nil && e.exp > now {
		return e
	}
	return nil
}

// entryOf returns e, or when it is nil the entry under key, made when
// absent.
func (s *Store) entryOf(key []byte, e *entry) *entry {
	if e != nil {
		return e
	}
	k := string(key)
	if e = s.m[k]; e == nil {
		e = new(entry)
		s.m[k] = e
		s.keys = append(s.keys, k)
	}
	return e
}
