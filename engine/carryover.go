package limit

import "strconv"

// Records carry usage over a change of Limit or Burst. A quota's record
// key holds its window and algorithm (stateSignature), not its Limit or
// Burst, so two policies under one Name that differ only in those (the
// old and the new policy of a deploy, or of a rolling one, with both
// running at once) read and write one record per identity:
//
//   - a window algorithm's record is the cost admitted per window, the
//     same whatever the Limit: 50 used of an old 100 per minute, under a
//     new 10, leave nothing until the window ends; under a new 200, 150.
//     Two Limits deciding on one record never admit more in a window than
//     the larger one: each admits only while the count is below its own
//     Limit.
//   - a token bucket's record is its theoretical arrival time, the time
//     until it is full again: under a changed Burst the used tokens are
//     the same; under a changed Limit the same time until full. Its
//     fraction of a millisecond, in units of 1/Limit ms, is read in the
//     new units: under a raised Limit shorter by less than 1 ms, under a
//     lowered one longer (by up to old/new Limit ms). A record beyond the
//     new bucket (a lowered Burst or Limit) reads as an empty bucket with
//     every reservation taken, so no delay exceeds the new policy's.
//
// A change of the Window, Per, Location, Algorithm, AlignWindows or MaxWait
// starts every identity afresh: those read a record differently and have
// records of their own.

// windowSignature is the part of a quota's signature its record key
// holds: "p" and the window in seconds (or "<n>ms"), plus the algorithm
// letter when it is not the default sliding window: "p60", "p60f",
// "p1g", "p250msf".
func windowSignature(a Algorithm, windowMS int64) string {
	b := []byte{'p'}
	if windowMS%1000 == 0 {
		b = strconv.AppendInt(b, windowMS/1000, 10)
	} else {
		b = strconv.AppendInt(b, windowMS, 10)
		b = append(b, "ms"...)
	}
	if a != SlidingWindow {
		b = append(b, letter(a))
	}
	return string(b)
}
