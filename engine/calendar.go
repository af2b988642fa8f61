package limit

import (
	"fmt"
	"github.com/quotagate/quotagate/engine/limitstore"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Period is a calendar unit a quota counts in, in place of a Window:
// Policy.Per and Rate.Per. A calendar quota's window is the calendar day,
// ISO week (Monday first), month or year containing the request, in the
// quota's Location, and begins at the local boundary: a day lasts 23, 24
// or 25 hours across a daylight-saving change, a month 28 to 31 days, a
// year 365 or 366. The zero value means no calendar unit (Window
// applies).
type Period uint8

// The calendar units of Policy.Per and Rate.Per.
const (
	// Day is the local calendar day, from midnight to midnight.
	Day Period = iota + 1
	// Week is the ISO week, from Monday midnight to the next Monday's.
	Week
	// Month is the calendar month, from the first at midnight.
	Month
	// Year is the calendar year, from the first of January at midnight.
	Year
)

// String returns "day", "week", "month" or "year" ("none" for 0).
func (p Period) String() string {
	switch p {
	case 0:
		return "none"
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return "period(" + strconv.Itoa(int(p)) + ")"
}

// nominalMS is the period's usual length in ms (a day of 24 h, a month of
// 31 days, a year of 366 days): the longest but for a daylight-saving
// change, and what the checks of quota numbers use.
func (p Period) nominalMS() int64 {
	const day = 24 * 3600 * 1000
	switch p {
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 31 * day
	}
	return 366 * day
}

// calendar is a calendar quota's unit and zone, with the span of the
// period last used (one per quota, shared by the copies of its quotaSpec).
type calendar struct {
	per  Period
	loc  *time.Location
	last atomic.Pointer[calendarSpan]
}

// calendarSpan is one period: [start, end) in Unix ms.
type calendarSpan struct{ start, end int64 }

// span returns the period containing the instant now (Unix ms): its start
// and its length, ms. The period last asked for is kept, so that a
// request costs one atomic load until the next boundary.
func (c *calendar) span(now int64) (start, length int64) {
	if s := c.last.Load(); s != nil && s.start <= now && now < s.end {
		return s.start, s.end - s.start
	}
	st, end := periodBounds(c.per, c.loc, time.UnixMilli(now))
	s := &calendarSpan{st.UnixMilli(), end.UnixMilli()}
	c.last.Store(s)
	return s.start, s.end - s.start
}

// periodBounds returns the period of unit per containing t in loc: its
// first instant and the first instant of the next period.
func periodBounds(per Period, loc *time.Location, t time.Time) (start, end time.Time) {
	t = t.In(loc)
	y, m, d := t.Date()
	switch per {
	case Day:
		return localMidnight(y, m, d, loc), localMidnight(y, m, d+1, loc)
	case Week:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
		return localMidnight(y, m, d, loc), localMidnight(y, m, d+7, loc)
	case Month:
		return localMidnight(y, m, 1, loc), localMidnight(y, m+1, 1, loc)
	}
	return localMidnight(y, 1, 1, loc), localMidnight(y+1, 1, 1, loc)
}

// localMidnight is the first instant of the local date (y, m, d), which
// time.Date normalises (the 32nd of a month is the 1st of the next). Where
// a zone change skips midnight (the clocks go from 23:59:59 to 01:00), the
// day begins at the change: time.Date may then name an instant of the
// day before, and the change is the end of that instant's zone period.
func localMidnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 12, 0, 0, 0, time.UTC) // the normalised date
	if ty, tm, td := t.Date(); ty != want.Year() || tm != want.Month() || td != want.Day() {
		if _, end := t.ZoneBounds(); !end.IsZero() && end.After(t) {
			t = end
		}
	}
	return t
}

// checkCalendar validates a calendar quota: Limit per Per in Location, for
// algorithm a. field is as for checkRate; required says that Limit has no
// default (a Rate). Errors name the field to change.
func checkCalendar(a Algorithm, field string, limit int64, window time.Duration, burst int64, per Period, loc *time.Location) (quotaSpec, error) {
	var q quotaSpec
	switch {
	case per > Year:
		return q, fmt.Errorf("%w: %sPer %d is unknown (Day, Week, Month or Year)", ErrInvalidPolicy, field, per)
	case window != 0:
		return q, fmt.Errorf("%w: %sWindow and %sPer are both set: a calendar quota (Per %v) has no Window", ErrInvalidPolicy, field, field, per)
	case a != FixedWindow:
		return q, fmt.Errorf("%w: %sPer %v needs Algorithm FixedWindow (Algorithm is %v): a calendar period is counted as one fixed window", ErrInvalidPolicy, field, per, a)
	case burst != 0:
		return q, fmt.Errorf("%w: %sBurst is only used by TokenBucket (Algorithm is %v)", ErrInvalidPolicy, field, a)
	case field != "" && limit == 0:
		return q, fmt.Errorf("%w: %sLimit is 0: every quota needs a Limit and a Window or Per", ErrInvalidPolicy, field)
	case limit < 0:
		return q, fmt.Errorf("%w: %sLimit %d is negative (0 means the default %d)", ErrInvalidPolicy, field, limit, defaultLimit)
	case limit > maxHeaderInt:
		return q, fmt.Errorf("%w: %sLimit %d has more than 15 digits, the most a RateLimit header integer may carry (RFC 9651); lower Limit", ErrInvalidPolicy, field, limit)
	}
	if loc == nil {
		loc = time.UTC
	}
	if loc.String() == "" {
		return q, fmt.Errorf("%w: %sLocation has no name: build it with time.LoadLocation (or time.FixedZone with a name)", ErrInvalidPolicy, field)
	}
	q.limit, q.windowMS = limit, per.nominalMS()
	if q.limit == 0 {
		q.limit = defaultLimit
	}
	q.cal = &calendar{per: per, loc: loc}
	return q, nil
}

// calendarSignature is a calendar quota's signature, "<limit>p<unit>":
// "20pday", "10000pmonth" (the zone is not part of it; see
// calendarState).
func calendarSignature(limit int64, per Period) string {
	return strconv.FormatInt(limit, 10) + "p" + per.String()
}

// calendarState is a calendar quota's state signature, "p<unit>@<zone>"
// ("pday@America/New_York"): no Limit, so that a Limit changed under one
// Name keeps what each identity used; the unit and the zone, so that
// quotas counting other periods never share a record.
func calendarState(per Period, loc *time.Location) string {
	return "p" + per.String() + "@" + loc.String()
}

// quotaSignature is q's signature: calendarSignature for a calendar
// quota, else signature.
func (q *quotaSpec) signature(a Algorithm) string {
	if q.cal != nil {
		return calendarSignature(q.limit, q.cal.per)
	}
	return signature(a, q.limit, q.windowMS, q.burst)
}

// checkQuota validates one quota, a calendar one (per set: checkCalendar)
// or one with a Window (checkRate).
func checkQuota(a Algorithm, field string, limit int64, window time.Duration, burst int64, per Period, loc *time.Location) (quotaSpec, error) {
	switch {
	case per != 0:
		return checkCalendar(a, field, limit, window, burst, per, loc)
	case loc != nil:
		return quotaSpec{}, fmt.Errorf("%w: %sLocation is set but %sPer is not: Location is the zone of a calendar quota (Per Day, Week, Month or Year)", ErrInvalidPolicy, field, field)
	}
	return checkRate(a, field, limit, window, burst)
}

// repeats reports whether quotas o and q of one set would share a record
// (stateSignature): the same window, or for calendar quotas the same unit
// and zone, whatever their Limits.
func repeats(o, q *quotaSpec) bool {
	if (o.cal == nil) != (q.cal == nil) {
		return false
	}
	if o.cal != nil {
		// One unit and zone is one record, whatever the Limits.
		return o.cal.per == q.cal.per && o.cal.loc.String() == q.cal.loc.String()
	}
	return o.windowMS == q.windowMS // one window is one record, whatever the Limits
}

// stateSignature is q's state signature under policy p (the function
// stateSignature; calendarState for a calendar quota).
func (q *quotaSpec) stateSignature(p *Policy) string {
	if q.cal != nil {
		return calendarState(q.cal.per, q.cal.loc)
	}
	return stateSignature(p.Algorithm, q.limit, q.windowMS, q.burst, p.AlignWindows, p.MaxWait.Milliseconds())
}

// hasCalendar reports whether a quota of any plan counts calendar periods.
func (r *resolved) hasCalendar() bool {
	for i := range r.plans {
		set := &r.plans[i].sets[0]
		for j := range set.n {
			if set.q[j].cal != nil {
				return true
			}
		}
	}
	return false
}

// calendarWindows names the window of each calendar quota of op (the
// quotas of set): the period containing the engine's clock reading, its
// start as the phase and its length as the window (Quota.Calendar). The
// other quotas are marked as not calendar ones (the Op is reused).
func (l *Limiter) calendarWindows(op *limitstore.Op, set *quotaSet) {
	now := int64(0)
	for i := range set.n {
		q := &op.Quotas[i]
		c := set.q[i].cal
		q.Calendar = c != nil
		if c == nil {
			continue
		}
		if now == 0 {
			now = l.cfg.clock().UnixMilli()
		}
		q.PhaseMS, q.WindowMS = c.span(now)
	}
}

// clock is the engine's clock reading: WithClock's, or time.Now.
func (c *config) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// WithClock sets the clock the engine reads to find the calendar period
// of a request (Policy.Per, Rate.Per); default time.Now. Stores read
// clocks of their own (the Redis server's, or the one given to the
// store): give them the same one in tests with a fake clock. A nil now is
// an error.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock: now is nil", ErrInvalidOption)
		}
		c.now = now
		return nil
	}
}

// calendarHeaders renders the RateLimit-Policy values of a quotaSet with
// calendar quotas, whose w is the length of the current period: rendered
// once per period (the last kept), not per request.
type calendarHeaders struct {
	set     *quotaSet
	names   []string // each quota's quoted name
	limits  []string // each quota's Limit in decimal
	windows []string // each quota's w for a quota with a Window
	last    atomic.Pointer[calendarPolicy]
}

// calendarPolicy is the rendering for the periods starting at starts.
type calendarPolicy struct {
	starts           [limitstore.MaxQuotas]int64
	ietfPolicy, trip string
}

// newCalendarHeaders returns the renderer of set's RateLimit-Policy
// values, nil when set has no calendar quota.
func newCalendarHeaders(set *quotaSet, names, limits, windows []string) *calendarHeaders {
	for i := range set.n {
		if set.q[i].cal != nil {
			return &calendarHeaders{set: set, names: names, limits: limits, windows: windows}
		}
	}
	return nil
}

// policy returns the RateLimit-Policy values (the IETF form and the -06
// form) for a decision whose quotas counted in windows (QuotaResult.Window:
// a calendar quota's period start, Unix ms).
func (h *setHeaders) policy(windows *[limitstore.MaxQuotas]int64) (ietf, triplet string) {
	c := h.cal
	if c == nil {
		return h.ietfPolicy, h.triplet
	}
	var starts [limitstore.MaxQuotas]int64
	for i := range c.set.n {
		if c.set.q[i].cal != nil {
			starts[i] = windows[i]
		}
	}
	if p := c.last.Load(); p != nil && p.starts == starts {
		return p.ietfPolicy, p.trip
	}
	var ie, tr []string
	for i := range c.set.n {
		w := c.windows[i]
		if cq := c.set.q[i].cal; cq != nil {
			start, end := periodBounds(cq.per, cq.loc, time.UnixMilli(starts[i]))
			w = strconv.FormatInt(ceilDiv(end.UnixMilli()-start.UnixMilli(), 1000), 10)
		}
		ie = append(ie, c.names[i]+";q="+c.limits[i]+";w="+w)
		tr = append(tr, c.limits[i]+";w="+w)
	}
	p := &calendarPolicy{starts: starts, ietfPolicy: strings.Join(ie, ", "), trip: strings.Join(tr, ", ")}
	c.last.Store(p)
	return p.ietfPolicy, p.trip
}
