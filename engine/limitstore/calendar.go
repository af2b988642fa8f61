package limitstore

// calendarView is windowView for a Calendar quota: the window is the one
// the engine named, [PhaseMS, PhaseMS+WindowMS), and its index is its
// start, so that each period of one key has its own index whatever the
// lengths of the periods (a day of 23 or 25 hours, a month of 28 to 31
// days). The store's clock does not move the decision to another period:
// a store clock a little behind or ahead of the engine's counts the
// request in the engine's period (calendarReset bounds the delays). The
// clock-step rules are windowView's: a stored later period that starts at
// most clockSkewMS after now (another process's clock ahead of this one)
// is honoured as it stands, the cost counted in it; one further ahead is
// read as the named period, its count carried over (norm).
func (q *Quota) calendarView(v *windowView, s *State, now int64) {
	start := q.PhaseMS
	*v = windowView{idx: start, start: start, at: now}
	stored := s.Window
	if stored > start {
		if stored-now <= clockSkewMS {
			v.idx, v.start, v.at = stored, stored, stored
		} else {
			stored, v.norm = start, true
		}
	}
	if stored == v.idx {
		v.curr = s.Count
	}
}

// calendarReset bounds a Calendar quota's time to the end of its window,
// reset, to [0, w+clockSkewMS]: a store clock past the named window's end
// (the engine's clock behind) says 0, one before its start never more
// than the window and the skew allowed.
func calendarReset(reset, w int64) int64 {
	return min(max(reset, 0), w+clockSkewMS)
}
