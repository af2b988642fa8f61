package limit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// periodKey names the calendar period of unit per containing t in loc, by
// the local date alone: what the independent computation compares.
func periodKey(per limit.Period, loc *time.Location, t time.Time) [2]int {
	l := t.In(loc)
	switch per {
	case limit.Day:
		return [2]int{l.Year(), l.YearDay()}
	case limit.Week:
		y, w := l.ISOWeek()
		return [2]int{y, w}
	case limit.Month:
		return [2]int{l.Year(), int(l.Month())}
	}
	return [2]int{l.Year(), 0}
}

// refBounds finds the period of t by bisection on the local date (no
// date arithmetic): its first instant, and the first instant after it
// with another period, both to the millisecond.
func refBounds(per limit.Period, loc *time.Location, t time.Time) (start, end time.Time) {
	key := periodKey(per, loc, t)
	same := func(ms int64) bool { return periodKey(per, loc, time.UnixMilli(ms)) == key }
	const span = 400 * 24 * 3600 * 1000
	tm := t.UnixMilli()
	lo, hi := tm-span, tm // !same(lo), same(hi)
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; same(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	start = time.UnixMilli(hi)
	lo, hi = tm, tm+span // same(lo), !same(hi)
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; same(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return start, time.UnixMilli(hi)
}

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// calendarCase is an instant (local wall time in zone) and a unit.
type calendarCase struct {
	zone string
	per  limit.Period
	at   string // local time, "2006-01-02 15:04"
	// length is the period's length the case is about (a check of the
	// reference itself: a DST day is 23 or 25 h).
	length time.Duration
}

var calendarCases = []calendarCase{
	// Both transitions of three zones, the day and its week and month.
	{"America/New_York", limit.Day, "2026-03-08 12:00", 23 * time.Hour},
	{"America/New_York", limit.Day, "2026-03-08 00:30", 23 * time.Hour},
	{"America/New_York", limit.Day, "2026-11-01 01:30", 25 * time.Hour},
	{"America/New_York", limit.Day, "2026-11-01 23:59", 25 * time.Hour},
	{"America/New_York", limit.Week, "2026-03-08 12:00", 7*24*time.Hour - time.Hour},
	{"America/New_York", limit.Week, "2026-11-02 00:00", 7 * 24 * time.Hour},
	{"America/New_York", limit.Month, "2026-03-31 23:00", 31*24*time.Hour - time.Hour},
	{"America/New_York", limit.Month, "2026-11-01 01:30", 30*24*time.Hour + time.Hour},
	{"Europe/Berlin", limit.Day, "2026-03-29 03:00", 23 * time.Hour},
	{"Europe/Berlin", limit.Day, "2026-10-25 02:30", 25 * time.Hour},
	{"Europe/Berlin", limit.Week, "2026-10-25 12:00", 7*24*time.Hour + time.Hour},
	{"Europe/Berlin", limit.Month, "2026-10-01 00:00", 31*24*time.Hour + time.Hour},
	{"Australia/Sydney", limit.Day, "2026-04-05 02:30", 25 * time.Hour},
	{"Australia/Sydney", limit.Day, "2026-10-04 03:00", 23 * time.Hour},
	{"Australia/Sydney", limit.Month, "2026-04-30 23:59", 30*24*time.Hour + time.Hour},
	// Half-hour zones: one with DST, one without.
	{"Australia/Adelaide", limit.Day, "2026-04-05 02:30", 25 * time.Hour},
	{"Australia/Adelaide", limit.Day, "2026-10-04 03:00", 23 * time.Hour},
	{"Australia/Adelaide", limit.Week, "2026-10-04 03:00", 7*24*time.Hour - time.Hour},
	{"Asia/Kolkata", limit.Day, "2026-06-15 00:00", 24 * time.Hour},
	{"Asia/Kolkata", limit.Month, "2026-02-14 05:30", 28 * 24 * time.Hour},
	// A zone whose clocks skip midnight (00:00 -> 01:00).
	{"America/Santiago", limit.Day, "2026-09-06 12:00", 23 * time.Hour},
	// Month ends of 28, 29, 30 and 31 days; a leap year; a year end.
	{"UTC", limit.Month, "2026-02-28 23:59", 28 * 24 * time.Hour},
	{"UTC", limit.Month, "2028-02-29 12:00", 29 * 24 * time.Hour},
	{"UTC", limit.Month, "2026-04-30 23:59", 30 * 24 * time.Hour},
	{"UTC", limit.Month, "2026-01-31 23:59", 31 * 24 * time.Hour},
	{"UTC", limit.Year, "2028-07-01 00:00", 366 * 24 * time.Hour},
	{"UTC", limit.Year, "2026-12-31 23:59", 365 * 24 * time.Hour},
	{"America/New_York", limit.Year, "2026-12-31 23:59", 365 * 24 * time.Hour},
	{"UTC", limit.Week, "2026-12-31 12:00", 7 * 24 * time.Hour}, // ISO week 53 of 2026
	{"UTC", limit.Week, "2027-01-03 23:59", 7 * 24 * time.Hour}, // a Sunday: the week began on Monday 2026-12-28
	{"UTC", limit.Day, "2026-12-31 23:59", 24 * time.Hour},
}

// TestCalendarWindowsAgainstTheTimePackage: for each case the window
// begins at the local boundary (a request just before it counts in the
// previous window, one at it in a fresh one), a limited request's
// RetryAfter, ResetAfter and ResetAt are the true time to the next local
// boundary, the request just before that is still limited and the one at
// it admitted; RateLimit-Policy's w is the period's length. Each bound is
// the bisection's (refBounds), not the engine's date arithmetic.
func TestCalendarWindowsAgainstTheTimePackage(t *testing.T) {
	for _, c := range calendarCases {
		t.Run(fmt.Sprintf("%s/%v/%s", c.zone, c.per, c.at), func(t *testing.T) {
			loc := mustZone(t, c.zone)
			at, err := time.ParseInLocation("2006-01-02 15:04", c.at, loc)
			if err != nil {
				t.Fatal(err)
			}
			start, end := refBounds(c.per, loc, at)
			if got := end.Sub(start); got != c.length {
				t.Fatalf("reference period [%v, %v) lasts %v, the case says %v", start, end, got, c.length)
			}
			clock := limittest.NewClock(start.Add(-time.Millisecond))
			store := limittest.NewStore(clock.Now)
			l := mustNew(t, store, limit.Policy{Name: "cal", Algorithm: limit.FixedWindow, Limit: 2, Per: c.per, Location: loc,
				Disclosure: limit.DiscloseAlways}, limit.WithClock(clock.Now))
			ctx := context.Background()
			consume := func() limit.Decision {
				t.Helper()
				d, err := l.Consume(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			// The previous period, used up just before the boundary.
			consume()
			consume()
			if d := consume(); d.Allowed {
				t.Fatalf("at %v: third request admitted", clock.Now())
			}
			// The boundary: a fresh window.
			clock.Set(start)
			if d := consume(); !d.Allowed || d.Remaining != 1 {
				t.Fatalf("at the boundary %v: %+v, want admitted with 1 remaining", start, d)
			}
			clock.Set(at)
			if d := consume(); !d.Allowed {
				t.Fatalf("at %v: second request of the window limited", at)
			}
			d := consume()
			if d.Allowed {
				t.Fatalf("at %v: third request of the window admitted", at)
			}
			want := end.Sub(at)
			if d.RetryAfter != want || d.ResetAfter != want || !d.ResetAt.Equal(end) {
				t.Errorf("at %v: RetryAfter %v, ResetAfter %v, ResetAt %v; want %v, %v, %v",
					at, d.RetryAfter, d.ResetAfter, d.ResetAt, want, want, end)
			}
			r := check(l, ctx, req("192.0.2.1:1", "/"))
			if w := fmt.Sprintf(";w=%d", int64(end.Sub(start)/time.Second)); !strings.Contains(r.Header.Get("RateLimit-Policy"), w) {
				t.Errorf("RateLimit-Policy %q, want %s", r.Header.Get("RateLimit-Policy"), w)
			}
			clock.Set(end.Add(-time.Millisecond))
			if d := consume(); d.Allowed || d.RetryAfter != time.Millisecond {
				t.Errorf("1 ms before the end %v: %+v, want limited for 1 ms", end, d)
			}
			clock.Set(end)
			if d := consume(); !d.Allowed {
				t.Errorf("at the next boundary %v: limited", end)
			}
		})
	}
}

// TestCalendarComposesWithRollingQuotas: 2 per second and 3 per day in
// New York, all or nothing, with cost and refunds.
func TestCalendarComposesWithRollingQuotas(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	at := time.Date(2026, 3, 7, 23, 0, 0, 0, ny)
	clock := limittest.NewClock(at)
	store := limittest.NewStore(clock.Now)
	l := mustNew(t, store, limit.Policy{Algorithm: limit.FixedWindow, Quotas: []limit.Rate{
		{Limit: 2, Window: time.Second}, {Limit: 3, Per: limit.Day, Location: ny}}}, limit.WithClock(clock.Now))
	ctx := context.Background()
	if d, _ := l.ConsumeN(ctx, "k", 2); !d.Allowed {
		t.Fatal("cost 2: limited")
	}
	if d, _ := l.ConsumeN(ctx, "k", 1); d.Allowed {
		t.Fatal("the per-second quota admitted a third unit")
	}
	clock.Advance(time.Second)
	// 1 left today: cost 2 is limited by the day, and takes nothing from the second.
	d, _ := l.ConsumeN(ctx, "k", 2)
	midnight := time.Date(2026, 3, 8, 0, 0, 0, 0, ny)
	if d.Allowed || d.RetryAfter != midnight.Sub(clock.Now()) {
		t.Fatalf("cost 2 with 1 left today: %+v, want limited until midnight (%v)", d, midnight.Sub(clock.Now()))
	}
	if d, _ := l.ConsumeN(ctx, "k", 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the last unit of the day: %+v", d)
	}
	// A refund gives the day's unit back.
	rl := mustNew(t, store, limit.Policy{Name: "refunded", Algorithm: limit.FixedWindow, Limit: 1, Per: limit.Day, Location: ny,
		CountStatus: func(s int) bool { return s < 400 }}, limit.WithClock(clock.Now))
	d, _ = rl.Consume(ctx, "k")
	rl.Finish(ctx, &d, 500)
	if d, _ := rl.Consume(ctx, "k"); !d.Allowed {
		t.Fatal("the refunded unit of the day was not given back")
	}
	// The 23-hour day: its window ends at the next midnight, 23 h later.
	clock.Set(midnight)
	if d, _ := l.ConsumeN(ctx, "k", 2); !d.Allowed {
		t.Fatalf("after midnight: %+v, want admitted", d)
	}
	if d, _ := rl.Consume(ctx, "k"); !d.Allowed || d.ResetAfter != 23*time.Hour {
		t.Fatalf("after midnight: %+v, want admitted, the day's reset 23 h away", d)
	}
}

// TestCalendarValidation: New names the field of every bad calendar
// quota.
func TestCalendarValidation(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	for _, c := range []struct {
		p    limit.Policy
		want string
	}{
		{limit.Policy{Algorithm: limit.FixedWindow, Per: limit.Day, Window: time.Hour}, "Window and Per are both set"},
		{limit.Policy{Per: limit.Day}, "Per day needs Algorithm FixedWindow"},
		{limit.Policy{Algorithm: limit.TokenBucket, Per: limit.Month}, "Per month needs Algorithm FixedWindow"},
		{limit.Policy{Algorithm: limit.FixedWindow, Per: limit.Year + 1}, "Per 5 is unknown"},
		{limit.Policy{Algorithm: limit.FixedWindow, Location: ny}, "Location is set but Per is not"},
		{limit.Policy{Algorithm: limit.FixedWindow, Per: limit.Day, Location: &time.Location{}}, "Location has no name"},
		{limit.Policy{Algorithm: limit.FixedWindow, Quotas: []limit.Rate{{Per: limit.Day}}}, "Quotas[0].Limit is 0"},
		{limit.Policy{Algorithm: limit.FixedWindow, Quotas: []limit.Rate{{Limit: 1, Per: limit.Day}, {Limit: 2, Per: limit.Day}}}, "Quotas[1] repeats Quotas[0]"},
		{limit.Policy{Algorithm: limit.FixedWindow, Per: limit.Day, Quotas: []limit.Rate{{Limit: 1, Per: limit.Day}}}, "Per and Location must be zero when Quotas is set"},
	} {
		_, err := limit.New(limittest.NewStore(time.Now), c.p)
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.p, err, c.want)
		}
	}
	if _, err := limit.New(limittest.NewStore(time.Now), limit.Policy{}, limit.WithClock(nil)); !errors.Is(err, limit.ErrInvalidOption) {
		t.Errorf("WithClock(nil): %v, want ErrInvalidOption", err)
	}
	// Day in New York and a rolling 24 h with one Limit are two quotas.
	if _, err := limit.New(limittest.NewStore(time.Now), limit.Policy{Algorithm: limit.FixedWindow, Quotas: []limit.Rate{
		{Limit: 5, Window: 24 * time.Hour}, {Limit: 5, Per: limit.Day, Location: ny}, {Limit: 5, Per: limit.Day}}}); err != nil {
		t.Errorf("a rolling day, a New York day and a UTC day: %v", err)
	}
}

// TestCalendarCheckDoesNotAllocate: the allowed path of a calendar quota
// allocates nothing once the key and the period exist.
func TestCalendarCheckDoesNotAllocate(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	l, _ := benchLimiter(t, limit.Policy{Algorithm: limit.FixedWindow, Quotas: []limit.Rate{
		{Limit: 1 << 28, Window: time.Hour}, {Limit: 1 << 29, Per: limit.Month, Location: ny}}})
	r := req("192.0.2.1:4711", "/v1/notes/1")
	ctx := context.Background()
	w := limittest.NewWriter()
	assertNoAllocs(t, l, func() {
		w.Reset()
		if d := l.Check(ctx, r, w); !d.Allowed {
			t.Fatal("limited")
		}
	})
}

// A calendar quota blocks like any other: the request that finds the
// day's quota spent blocks the identity for BlockFor, and the block
// outlasts the local midnight that brings the quota back.
func TestCalendarQuotaBlocks(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	clock := limittest.NewClock(time.Date(2026, 3, 7, 23, 59, 0, 0, ny))
	l := mustNew(t, limittest.NewStore(clock.Now), limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Per: limit.Day, Location: ny,
		BlockFor: 2 * time.Minute}, limit.WithClock(clock.Now))
	ctx := context.Background()
	for i := range 2 {
		if d, _ := l.Consume(ctx, "k"); !d.Allowed {
			t.Fatalf("request %d of the day: limited", i+1)
		}
	}
	if d, _ := l.Consume(ctx, "k"); d.Allowed || !d.Blocked || d.RetryAfter != 2*time.Minute {
		t.Fatalf("the day's quota spent: %+v, want blocked for 2m", d)
	}
	clock.Advance(90 * time.Second) // past midnight: a new day, still blocked
	if d, _ := l.Consume(ctx, "k"); d.Allowed || !d.Blocked || d.RetryAfter != 30*time.Second {
		t.Fatalf("the next day, 90 s into the block: %+v, want blocked 30 s more", d)
	}
	clock.Advance(30 * time.Second)
	if d, _ := l.Consume(ctx, "k"); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("the block over on the new day: %+v, want admitted with 1 left", d)
	}
}
