package app

import (
	"context"
	"strconv"
	"time"
)

// SlowLimit is how many GET /v1/slow requests of one client may be in
// flight at once.
const SlowLimit = 2

// SlowMax is the longest GET /v1/slow sleeps.
const SlowMax = 5 * time.Second

// Slow is GET /v1/slow's work: it sleeps ms milliseconds (the ?ms= query
// value: 0 when absent or not a number, at most SlowMax) or until ctx ends
// (the client went away), and returns the body to answer 200 with.
func Slow(ctx context.Context, ms string) string {
	n, err := strconv.Atoi(ms)
	if err != nil || n < 0 {
		n = 0
	}
	d := min(time.Duration(n)*time.Millisecond, SlowMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return `{"slept_ms":` + strconv.FormatInt(d.Milliseconds(), 10) + `}`
}
