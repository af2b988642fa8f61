// Package refmodel holds brute-force reference models of the rate-limit
// algorithms, for the engine's tests: they share no code with
// limitstore.Op.Apply, so agreement over long random sequences is evidence.
package refmodel

import "testing"

// The reference models below keep their own representation of a quota (a
// map of per-window totals; a token bucket's fill level) and find every
// number by brute force: Remaining by trying costs 1, 2, ... until one does
// not fit, RetryAfter and ResetAfter by scanning forward one millisecond at
// a time with the state frozen (a denied request writes nothing). They share
// no code with Op.Apply, so an agreement over long random sequences (several
// quotas, refunds, clock steps both ways, costs 0..capacity+1) is evidence,
// not tautology. The rules they encode are the documented ones (DESIGN.md,
// Algorithms): the sliding-window estimate, the token bucket's refill, and
// the clock-step rules (a stored window up to 1 s ahead is honoured as it
// stands; further ahead it is read as the current window and written back;
// a token bucket never holds less than nothing).

// Quota is a brute-force model of one quota.
type Quota interface {
	Capacity() int64
	// Fits reports whether cost would be admitted at t.
	Fits(t, cost int64) bool
	// Wait reports whether cost would be admitted at t by a request that
	// may wait up to wait ms for a reserved slot, and how long it waits
	// (the first instant it fits, the state frozen); window quotas never
	// reserve: Fits, 0.
	Wait(t, cost, wait int64) (int64, bool)
	// Normalize applies the clock-step reading at t to the stored state and
	// reports whether it changed it (the store must then write it).
	Normalize(t int64) bool
	// Admit takes cost at t and returns the window it counted in.
	Admit(t, cost int64) int64
	// Refund gives cost back to a charge counted in window win, reporting
	// whether the state changed.
	Refund(t, cost, win int64) bool
	// Window is the window a request at t counts in (0 for a bucket).
	Window(t int64) int64
	// Whole reports whether the quota is back to a fresh state at t.
	Whole(t int64) bool
	// ResetAfter is the time from t until the quota is whole again.
	ResetAfter(t int64) int64
	// TTLBound is the longest time to live a state may get.
	TTLBound() int64
	// Clone returns an independent copy: what a look that writes nothing
	// (a Peek) works on.
	Clone() Quota
	// Forget makes the quota fresh, as a store that deleted its state (a
	// Reset).
	Forget()
}

// Clone implements Quota.
func (m *Window) Clone() Quota {
	c := *m
	c.total = make(map[int64]int64, len(m.total))
	for k, v := range m.total {
		c.total[k] = v
	}
	return &c
}

// Forget implements Quota.
func (m *Window) Forget() { m.stored, m.total = 0, map[int64]int64{} }

// Clone implements Quota.
func (m *Bucket) Clone() Quota { c := *m; return &c }

// Forget implements Quota.
func (m *Bucket) Forget() { m.level, m.t0 = m.burst*m.w, 0 }

// Remaining is how many cost-1 requests m admits at t: the largest n that
// fits.
func Remaining(m Quota, t int64) int64 {
	n := int64(0)
	for n < m.Capacity() && m.Fits(t, n+1) {
		n++
	}
	return n
}

// RetryAfter scans forward for the first instant cost fits, the state
// frozen; a cost above the capacity points at the whole quota's return.
func RetryAfter(tb testing.TB, m Quota, t, cost int64) int64 {
	if cost > m.Capacity() {
		return max(m.ResetAfter(t), 1)
	}
	for dt := int64(1); dt < 1<<22; dt++ {
		if m.Fits(t+dt, cost) {
			return dt
		}
	}
	tb.Fatalf("model: cost %d never fits after %d", cost, t)
	return 0
}

// Window models FixedWindow and SlidingWindow with a map of per-window
// totals and the index of the latest window written.
type Window struct {
	sliding         bool
	limit, w, phase int64
	stored          int64           // the window of the stored state
	total           map[int64]int64 // cost admitted per window index
}

func NewWindow(sliding bool, limit, w, phase int64) *Window {
	return &Window{sliding: sliding, limit: limit, w: w, phase: phase, total: map[int64]int64{}}
}

func floorDivRef(a, b int64) int64 {
	if a >= 0 {
		return a / b
	}
	return -((-a + b - 1) / b)
}

func (m *Window) Capacity() int64   { return m.limit }
func (m *Window) idx(t int64) int64 { return floorDivRef(t-m.phase, m.w) }
func (m *Window) start(i int64) int64 {
	return i*m.w + m.phase
}

// read returns the window a request at t counts in, the instant it is
// judged at, the totals of that window and the one before, and whether the
// stored window is far ahead (read as the current one).
func (m *Window) read(t int64) (win, at, curr, prev int64, far bool) {
	win, at = m.idx(t), t
	from := win // the window whose totals are curr
	if m.stored > win {
		if m.start(m.stored)-t <= 1000 {
			win, at, from = m.stored, m.start(m.stored), m.stored
		} else {
			far, from = true, m.stored
		}
	}
	switch from {
	case m.stored:
		curr, prev = m.total[m.stored], m.total[m.stored-1]
	case m.stored + 1:
		prev = m.total[m.stored]
	}
	if !m.sliding {
		prev = 0
	}
	return win, at, curr, prev, far
}

func (m *Window) Fits(t, cost int64) bool {
	win, at, curr, prev, _ := m.read(t)
	if !m.sliding {
		return curr+cost <= m.limit
	}
	// prev*(w-e)/w + curr + cost <= limit, in integers.
	e := at - m.start(win)
	return prev*(m.w-e)+(curr+cost)*m.w <= m.limit*m.w
}

func (m *Window) Normalize(t int64) bool {
	win, _, curr, prev, far := m.read(t)
	if !far {
		return false
	}
	m.total = map[int64]int64{win: curr, win - 1: prev}
	m.stored = win
	return true
}

func (m *Window) Admit(t, cost int64) int64 {
	m.Normalize(t)
	win, _, _, _, _ := m.read(t)
	if win < m.stored-1 || win > m.stored+1 {
		m.total = map[int64]int64{}
	}
	if win > m.stored {
		m.stored = win
	}
	m.total[win] += cost
	return win
}

func (m *Window) Refund(_, cost, win int64) bool {
	if win != m.stored && (!m.sliding || win != m.stored-1) {
		return false
	}
	if m.total[win] == 0 || cost == 0 {
		return false
	}
	m.total[win] = max(m.total[win]-cost, 0)
	return true
}

func (m *Window) Wait(t, cost, _ int64) (int64, bool) { return 0, m.Fits(t, cost) }

func (m *Window) Window(t int64) int64 { win, _, _, _, _ := m.read(t); return win }

func (m *Window) Whole(t int64) bool {
	_, _, curr, prev, _ := m.read(t)
	return curr == 0 && prev == 0
}

func (m *Window) ResetAfter(t int64) int64 {
	if !m.sliding { // the end of the window
		win, _, _, _, _ := m.read(t)
		return m.start(win+1) - t
	}
	for dt := int64(0); ; dt++ {
		if m.Whole(t + dt) {
			return dt
		}
	}
}

func (m *Window) TTLBound() int64 {
	if m.sliding {
		return 2*m.w + 1000
	}
	return m.w + 2000
}

// Bucket models a token bucket by its fill level, in units where a token
// is w units and the bucket refills limit units per ms: capacity burst*w.
// The level at t counts from the level at t0, forwards or (after the clock
// stepped back) backwards, never above the capacity. Reservations take the
// level below zero, down to -mw*limit (mw ms of refill: MaxWait).
type Bucket struct {
	limit, burst, w, mw int64
	level, t0           int64
}

func NewBucket(limit, burst, w int64) *Bucket {
	return &Bucket{limit: limit, burst: burst, w: w, level: burst * w}
}

// NewWaitingBucket is NewBucket whose requests may reserve slots up to mw
// ms ahead.
func NewWaitingBucket(limit, burst, w, mw int64) *Bucket {
	return &Bucket{limit: limit, burst: burst, w: w, mw: mw, level: burst * w}
}

func (m *Bucket) Capacity() int64 { return m.burst }

// at returns the level at t, and whether it would be below empty (only
// after a backward clock step).
func (m *Bucket) at(t int64) (int64, bool) {
	full := m.burst * m.w
	if t >= m.t0 {
		if t-m.t0 >= (full-m.level+m.limit-1)/m.limit {
			return full, false
		}
		return m.level + (t-m.t0)*m.limit, false
	}
	if lv := m.level - (m.t0-t)*m.limit; lv >= -m.mw*m.limit {
		return lv, false
	}
	return -m.mw * m.limit, true
}

func (m *Bucket) Fits(t, cost int64) bool {
	lv, _ := m.at(t)
	return cost <= m.burst && lv >= cost*m.w
}

func (m *Bucket) Wait(t, cost, wait int64) (int64, bool) {
	if m.Fits(t, cost) {
		return 0, true
	}
	if cost > m.burst {
		return 0, false
	}
	for dt := int64(1); dt <= min(wait, m.mw); dt++ {
		if m.Fits(t+dt, cost) {
			return dt, true
		}
	}
	return 0, false
}

func (m *Bucket) Normalize(t int64) bool {
	lv, below := m.at(t)
	if below {
		m.level, m.t0 = lv, t
	}
	return below
}

func (m *Bucket) Admit(t, cost int64) int64 {
	lv, _ := m.at(t)
	m.level, m.t0 = lv-cost*m.w, t
	return m.Window(t)
}

// refund gives back what is left at t of a charge whose bucket was empty
// down to win (the TAT after it, ms rounded up): the charge's last
// min(cost, burst) tokens, less what the bucket has refilled past win - t;
// nothing when a later reservation is still ahead (level below zero, the
// TAT not at win).
func (m *Bucket) Refund(t, cost, win int64) bool {
	lv, below := m.at(t)
	full := m.burst * m.w
	if lv == full {
		return false
	}
	g := min(cost, m.burst) * m.w
	if win <= t || lv < 0 && m.Window(t) != win {
		// Refilled past, or followed by a reservation still ahead
		// (the level below zero, and not at this charge's window),
		// whose slot the time would give out a second time.
		g = 0
	} else {
		g = min(g, (win-t)*m.limit)
	}
	m.level, m.t0 = min(lv+g, full), t
	return below || g > 0
}

// window is the TAT at t, ms rounded up: t plus the time the missing level
// takes to refill.
func (m *Bucket) Window(t int64) int64 {
	lv, _ := m.at(t)
	return t + (m.burst*m.w-lv+m.limit-1)/m.limit
}
func (m *Bucket) Whole(t int64) bool {
	lv, _ := m.at(t)
	return lv == m.burst*m.w
}

func (m *Bucket) ResetAfter(t int64) int64 {
	for dt := int64(0); ; dt++ {
		if m.Whole(t + dt) {
			return dt
		}
	}
}

func (m *Bucket) TTLBound() int64 {
	return max((m.burst*m.w+m.mw*m.limit+m.limit-1)/m.limit, 1)
}

// Calendar models a calendar quota (limitstore.Quota.Calendar): a fixed
// window the caller names before each request (Name: the period's start
// and length, as the engine finds them in its own clock), counted by the
// period's start, with totals per period. The clock-step rules are the
// window's: a stored later period up to 1 s ahead of t is honoured as it
// stands; further ahead, its total is carried into the named period. A
// period has ended, and the quota is whole, at its start plus the named
// length; the time to that end is bounded to [0, length + 1 s].
type Calendar struct {
	limit         int64
	start, length int64           // the named period
	stored        int64           // the period of the stored state
	total         map[int64]int64 // cost admitted per period start
}

// NewCalendar returns a fresh calendar quota of limit per period.
func NewCalendar(limit int64) *Calendar {
	return &Calendar{limit: limit, total: map[int64]int64{}}
}

// Name sets the period the next requests count in.
func (m *Calendar) Name(start, length int64) { m.start, m.length = start, length }

// Clone implements Quota.
func (m *Calendar) Clone() Quota {
	c := *m
	c.total = make(map[int64]int64, len(m.total))
	for k, v := range m.total {
		c.total[k] = v
	}
	return &c
}

// Forget implements Quota.
func (m *Calendar) Forget() { m.stored, m.total = 0, map[int64]int64{} }

// Capacity implements Quota.
func (m *Calendar) Capacity() int64 { return m.limit }

// read returns the period a request at t counts in, its total and whether
// the stored period is far ahead (its total carried into the named one).
func (m *Calendar) read(t int64) (win, curr int64, far bool) {
	win = m.start
	if m.stored > m.start {
		if m.stored-t <= 1000 {
			return m.stored, m.total[m.stored], false
		}
		return m.start, m.total[m.stored], true
	}
	return win, m.total[win], false
}

// Fits implements Quota.
func (m *Calendar) Fits(t, cost int64) bool {
	_, curr, _ := m.read(t)
	return curr+cost <= m.limit
}

// Wait implements Quota: a calendar quota never reserves.
func (m *Calendar) Wait(t, cost, _ int64) (int64, bool) { return 0, m.Fits(t, cost) }

// Normalize implements Quota.
func (m *Calendar) Normalize(t int64) bool {
	win, curr, far := m.read(t)
	if !far {
		return false
	}
	m.total, m.stored = map[int64]int64{win: curr}, win
	return true
}

// Admit implements Quota.
func (m *Calendar) Admit(t, cost int64) int64 {
	m.Normalize(t)
	win, _, _ := m.read(t)
	if win > m.stored {
		m.stored = win
	}
	m.total[win] += cost
	return win
}

// Refund implements Quota.
func (m *Calendar) Refund(_, cost, win int64) bool {
	if win != m.stored || m.total[win] == 0 || cost == 0 {
		return false
	}
	m.total[win] = max(m.total[win]-cost, 0)
	return true
}

// Window implements Quota.
func (m *Calendar) Window(t int64) int64 { win, _, _ := m.read(t); return win }

// Whole implements Quota: nothing counted, or the period over.
func (m *Calendar) Whole(t int64) bool {
	win, curr, _ := m.read(t)
	return curr == 0 || t >= win+m.length
}

// ResetAfter implements Quota: the time to the end of the period.
func (m *Calendar) ResetAfter(t int64) int64 {
	win, _, _ := m.read(t)
	return min(max(win+m.length-t, 0), m.length+1000)
}

// TTLBound implements Quota.
func (m *Calendar) TTLBound() int64 { return m.length + 2000 }
