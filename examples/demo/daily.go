package main

import (
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"
	_ "time/tzdata" // -tz works without the system's zoneinfo

	"github.com/quotagate/quotagate/engine/limittest"
)

// dailyTZ is the zone the demo gives the server's -tz and prints GET
// /v1/daily's reset in.
var dailyTZ = flag.String("tz", "UTC", "time zone of GET /v1/daily's calendar day, passed to the server's -tz (an IANA name)")

// dailyRun is what the demo saw of GET /v1/daily: the table's row, and
// the first limit the day's quota answered after its 20 requests.
type dailyRun struct {
	row   row
	retry int64     // its Retry-After, s (0: none came)
	at    time.Time // when it was answered
}

// sendDaily sends GET /v1/daily with one API key, two a second (the
// second's quota), until the day's 20 are used, then once more: that one
// is limited until the next local midnight in the zone.
func sendDaily(base string) dailyRun {
	r := dailyRun{row: row{route: "GET /v1/daily X-API-Key: daily-demo (2/s)", client: "127.0.0.17"}}
	c := limittest.ClientFrom(r.row.client)
	defer c.CloseIdleConnections()
	key := [2]string{"X-API-Key", "daily-demo"}
	for r.row.ok < 20 && r.row.sent < 40 {
		status, _, err := request(c, "GET", base+"/v1/daily", key)
		r.row.sent++
		switch {
		case err != nil:
			r.row.other++
		case status == http.StatusOK:
			r.row.ok++
		case status == http.StatusTooManyRequests:
			r.row.limited++ // the second's quota (a window rolled mid-pair)
		default:
			r.row.other++
		}
		time.Sleep(510 * time.Millisecond)
	}
	status, h, err := request(c, "GET", base+"/v1/daily", key)
	r.row.sent++
	r.at = time.Now()
	if err == nil && status == http.StatusTooManyRequests {
		r.row.limited++
		r.retry, _ = strconv.ParseInt(h.Get("Retry-After"), 10, 64)
		r.row.retryAfter = h.Get("Retry-After") + " s"
	} else {
		r.row.other++
		r.row.retryAfter = "-"
	}
	return r
}

// checkDaily reports what GET /v1/daily showed: 20 admitted, then a limit
// whose Retry-After ends at the next local midnight in the zone.
func checkDaily(r dailyRun, check func(bool, string)) {
	loc, err := time.LoadLocation(*dailyTZ)
	if err != nil {
		check(false, fmt.Sprintf("daily: -tz %q: %v", *dailyTZ, err))
		return
	}
	local := r.at.In(loc)
	y, m, d := local.Date()
	midnight := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	reset := r.at.Add(time.Duration(r.retry) * time.Second)
	fmt.Printf("daily: X-API-Key daily-demo used its %d for the day; limited until %s (Retry-After %d s)\n",
		r.row.ok, reset.In(loc).Format("2006-01-02 15:04:05 MST"), r.retry)
	off := reset.Sub(midnight)
	check(r.row.ok == 20 && r.retry > 0 && off >= -time.Second && off <= 2*time.Second,
		fmt.Sprintf("daily: 20 per calendar day in %s, then 429 until local midnight (%s)", loc, midnight.Format("2006-01-02 15:04 MST")))
}
