package redisfault

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Load offers calls at a fixed rate, each on a goroutine of its own (as an
// HTTP server serves requests: a slow call does not hold back the next),
// and counts which succeeded. Its methods are safe for concurrent use.
type Load struct {
	t        testing.TB
	do       func(context.Context) error
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	answered atomic.Int64 // calls that returned nil
	failed   atomic.Int64 // calls that returned an error
	mark     atomic.Int64 // UnixNano; see Mark
	first    atomic.Int64 // UnixNano of the first success of a call started after mark; 0: none yet
}

// StartLoad calls do perSecond times per second until Stop (registered
// with t.Cleanup). do gets a background context: it bounds itself.
func StartLoad(t testing.TB, perSecond int, do func(context.Context) error) *Load {
	l := &Load{t: t, do: do, stop: make(chan struct{})}
	l.mark.Store(time.Now().UnixNano())
	l.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			l.wg.Go(l.call)
		}
	})
	t.Cleanup(l.Stop)
	return l
}

func (l *Load) call() {
	start := time.Now().UnixNano()
	if err := l.do(context.Background()); err != nil {
		l.failed.Add(1)
		return
	}
	l.answered.Add(1)
	if start >= l.mark.Load() && l.first.Load() == 0 {
		l.first.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// Stop ends the load and waits for the calls in flight. Idempotent.
func (l *Load) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// Answered is how many calls returned nil so far.
func (l *Load) Answered() int64 { return l.answered.Load() }

// Failed is how many calls returned an error so far.
func (l *Load) Failed() int64 { return l.failed.Load() }

// Mark starts a new observation at now and returns now: FirstAnswer then
// reports the first success of a call started at or after it (a call in
// flight across the mark does not count).
func (l *Load) Mark() time.Time {
	now := time.Now()
	l.first.Store(0)
	l.mark.Store(now.UnixNano())
	return now
}

// WaitFirstAnswer waits (at most within) for the first success of a call
// started after the last Mark and returns when it completed; it fails the
// test when none comes.
func (l *Load) WaitFirstAnswer(within time.Duration) time.Time {
	l.t.Helper()
	deadline := time.Now().Add(within)
	for l.first.Load() == 0 {
		if time.Now().After(deadline) {
			l.t.Fatalf("redisfault: no call started after the mark succeeded within %v (%d failed so far)", within, l.Failed())
		}
		time.Sleep(5 * time.Millisecond) // observing the load
	}
	return time.Unix(0, l.first.Load())
}

// WaitAnswered waits (at most within) until n more calls have succeeded
// and returns how long that took; it fails the test otherwise.
func (l *Load) WaitAnswered(n int64, within time.Duration) time.Duration {
	l.t.Helper()
	t0 := time.Now()
	target := l.Answered() + n
	for l.Answered() < target {
		if time.Since(t0) > within {
			l.t.Fatalf("redisfault: %d of %d calls succeeded within %v (%d failed so far)", l.Answered()-target+n, n, within, l.Failed())
		}
		time.Sleep(5 * time.Millisecond) // observing the load
	}
	return time.Since(t0)
}
