// Package faults puts the engine's store protections (the shared deadline
// that measures the store, the circuit breaker, the local deny cache) in
// front of a real redis-server of the test's own and then breaks the
// server: slowed (a delaying proxy, DEBUG SLEEP), frozen (SIGSTOP/SIGCONT),
// killed and restarted. Each latency target is checked as a bound with a
// margin for a loaded machine (two shared cores, -race), and
// the measured figures are logged.
//
// The tests run one after the other (no t.Parallel): their figures are
// timings.
package faults

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// rueidis delays a lazy reconnect after a dropped connection (a
		// goroutine that sleeps up to ~1 s), which ends by itself after
		// the client is closed.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

const storeTimeout = guard.DefaultTimeout // the Redis store's default timeout

// newStore is a Store on url (a proxy or a server) closed with the test.
func newStore(t *testing.T, url string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewFromURL(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("PING %s: %v", url, err)
	}
	return s
}

// prefix is a key prefix of the test's own.
func prefix(t *testing.T) limit.Option {
	return limit.WithKeyPrefix(fmt.Sprintf("faults%d", time.Now().UnixNano()))
}

// sample is one request: when it started (since the run's start), how long
// it took, and what decided it.
type sample struct {
	start, took time.Duration
	allowed     bool
	failed      bool // the store failed (or was skipped): the FailureMode decided
	fromStore   bool // a store answered (Redis, or its deny cache)
}

// recorder collects samples from concurrent requests.
type recorder struct {
	t0 time.Time
	mu sync.Mutex
	s  []sample
}

func newRecorder() *recorder { return &recorder{t0: time.Now()} }

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.s = append(r.s, s)
	r.mu.Unlock()
}

func (r *recorder) since(t time.Time) time.Duration { return t.Sub(r.t0) }

// between returns the samples that started in [from, to).
func (r *recorder) between(from, to time.Duration) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	for _, s := range r.s {
		if s.start >= from && s.start < to {
			out = append(out, s)
		}
	}
	return out
}

// storeAnswersAgain is how long after at the first request that started
// after at and was decided by a store (not by a failure mode) completed; -1
// when none was.
func (r *recorder) storeAnswersAgain(at time.Duration) time.Duration {
	first := time.Duration(-1)
	for _, s := range r.between(at, time.Hour) {
		if s.fromStore && (first < 0 || s.start+s.took < first) {
			first = s.start + s.took
		}
	}
	if first < 0 {
		return -1
	}
	return first - at
}

// stats summarises latencies.
type stats struct {
	n             int
	p50, p95, max time.Duration
	fast          float64 // share answered within fastBound()
}

func latencies(ss []sample) stats {
	if len(ss) == 0 {
		return stats{}
	}
	d := make([]time.Duration, len(ss))
	fast := 0
	for i, s := range ss {
		d[i] = s.took
		if s.took <= fastBound() {
			fast++
		}
	}
	slices.Sort(d)
	return stats{n: len(d), p50: d[len(d)/2], p95: d[len(d)*95/100], max: d[len(d)-1], fast: float64(fast) / float64(len(d))}
}

func (s stats) String() string {
	return fmt.Sprintf("%d requests, p50 %v, p95 %v, max %v, %.1f%% within %v",
		s.n, s.p50.Round(10*time.Microsecond), s.p95.Round(10*time.Microsecond), s.max.Round(10*time.Microsecond), 100*s.fast, fastBound())
}

// breakerLog is an Observer that keeps the instants of breaker transitions
// and counts skipped calls.
type breakerLog struct {
	mu      sync.Mutex
	opened  []time.Time
	closed  []time.Time
	skipped map[string]int
}

func (b *breakerLog) Decision(limit.DecisionEvent)                {}
func (b *breakerLog) Issue(string, limit.Issue)                   {}
func (b *breakerLog) Refund(string, string)                       {}
func (b *breakerLog) StoreError(string, limit.FailureMode)        {}
func (b *breakerLog) StoreDuration(string, string, time.Duration) {}
func (b *breakerLog) Wait(string, time.Duration, bool)            {}
func (b *breakerLog) StoreEvent(_, ev string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev {
	case "opened", "closed":
		b.at(ev == "opened")
	default:
		b.skipped[ev]++
	}
}
func (b *breakerLog) at(open bool) {
	if open {
		b.opened = append(b.opened, time.Now())
	} else {
		b.closed = append(b.closed, time.Now())
	}
}

func newBreakerLog() *breakerLog { return &breakerLog{skipped: map[string]int{}} }

func (b *breakerLog) transitions() (opened, closed []time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.opened), slices.Clone(b.closed)
}

func (b *breakerLog) skips(reason string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.skipped[reason]
}

// every calls f at rate per second for d, each call on its own goroutine,
// and waits for the calls.
func every(rate int, d time.Duration, f func()) {
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		<-tick.C
		wg.Go(f)
	}
	wg.Wait()
}

// counter counts admitted and failed decisions.
type counter struct{ admitted, failed, total atomic.Int64 }

func (c *counter) add(d limit.Decision, err error) {
	c.total.Add(1)
	if d.Allowed {
		c.admitted.Add(1)
	}
	if err != nil {
		c.failed.Add(1)
	}
}
