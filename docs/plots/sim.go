package main

import (
	"context"
	"fmt"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// Every scenario runs the real engine (limit.New on a memory store) on a fake
// clock, so the plots and tables show what the library decides, not a model
// of it. The instants are fixed, so the output is the same on every run.

const (
	quota  = 10               // Policy.Limit of every variant
	window = 10 * time.Second // Policy.Window of every variant
	span   = 40 * time.Second // length of every timeline
)

// epoch is the instant the timelines start at: a multiple of the window since
// the Unix epoch, so the aligned windows (AlignWindows) start at t = 0, 10 s,
// 20 s, ...
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// variant is one algorithm configuration the guide compares.
type variant struct {
	slug   string // file name stem
	name   string // short name for tables and legends
	title  string // plot title
	policy limit.Policy
	phased bool // window boundaries follow the identity's phase
	window bool // a window algorithm (has boundaries to draw)
}

// variants are the four configurations of the guide, 10 requests per 10 s
// each. The sliding window is aligned too, so that its windows coincide with
// the aligned fixed window's and the two differ only by the algorithm.
var variants = []variant{
	{
		slug: "fixed-aligned", name: "fixed window, aligned",
		title:  "Fixed window, AlignWindows: true",
		policy: limit.Policy{Algorithm: limit.FixedWindow, Limit: quota, Window: window, AlignWindows: true},
		window: true,
	},
	{
		slug: "fixed-phased", name: "fixed window, per-identity phase",
		title:  "Fixed window, per-identity phase (the default)",
		policy: limit.Policy{Algorithm: limit.FixedWindow, Limit: quota, Window: window},
		phased: true, window: true,
	},
	{
		slug: "sliding", name: "sliding window, aligned",
		title:  "Sliding window, AlignWindows: true",
		policy: limit.Policy{Algorithm: limit.SlidingWindow, Limit: quota, Window: window, AlignWindows: true},
		window: true,
	},
	{
		slug: "token-bucket", name: "token bucket",
		title:  "Token bucket (GCRA), Burst 10, refill 1 per second",
		policy: limit.Policy{Algorithm: limit.TokenBucket, Limit: quota, Window: window, Burst: quota},
	},
}

// herdVariants are the configurations of the many-clients scenario: the
// sliding window keeps its default per-identity phase there.
var herdVariants = []variant{
	variants[0],
	variants[1],
	{
		slug: "sliding-phased", name: "sliding window, per-identity phase",
		policy: limit.Policy{Algorithm: limit.SlidingWindow, Limit: quota, Window: window},
		phased: true, window: true,
	},
	variants[3],
}

// client is the identity of the single-client scenarios (Consume's identity
// argument). Its phase, hash(identity) mod Window, is what phaseOf reports.
const client = "client-a"

// segment names a part of the single-client traffic.
type segment string

const (
	burstA  segment = "burst at 0 s"
	trickle segment = "trickle"
	burstB  segment = "burst across 30 s"
)

var segments = []segment{burstA, trickle, burstB}

// request is one request of the single-client traffic.
type request struct {
	at  time.Duration // since epoch
	seg segment
}

// traffic is the single-client timeline:
//   - 15 requests 100 ms apart from 0 s (0.0 s to 1.4 s);
//   - a trickle of one request every 2 s from 3 s to 17 s (8 requests, half
//     the policy's rate);
//   - quiet, then 24 requests 100 ms apart from 29.0 s to 31.3 s, across the
//     aligned window boundary at 30 s.
func traffic() []request {
	var rs []request
	for i := range 15 {
		rs = append(rs, request{time.Duration(i) * 100 * time.Millisecond, burstA})
	}
	for t := 3 * time.Second; t <= 17*time.Second; t += 2 * time.Second {
		rs = append(rs, request{t, trickle})
	}
	for i := range 24 {
		rs = append(rs, request{29*time.Second + time.Duration(i)*100*time.Millisecond, burstB})
	}
	return rs
}

// outcome is the engine's answer to one request.
type outcome struct {
	request
	allowed bool // Decision.Allowed
}

// newLimiter returns a limiter for p on a fresh memory store whose clock is
// the returned fake clock, set to epoch.
func newLimiter(p limit.Policy) (*limit.Limiter, *limittest.Clock, error) {
	clock := limittest.NewClock(epoch)
	store, err := memstore.New(memstore.WithClock(clock.Now))
	if err != nil {
		return nil, nil, err
	}
	l, err := limit.New(store, p)
	if err != nil {
		return nil, nil, err
	}
	return l, clock, nil
}

// consume asks l for one request of identity at epoch+at.
func consume(l *limit.Limiter, clock *limittest.Clock, identity string, at time.Duration) (limit.Decision, error) {
	clock.Set(epoch.Add(at))
	d, err := l.ConsumeN(context.Background(), identity, 1)
	if err != nil {
		return d, fmt.Errorf("ConsumeN(%q) at %v: %w", identity, at, err)
	}
	return d, nil
}

// runSingle plays traffic through a fresh limiter of v as client.
func runSingle(v variant, reqs []request) ([]outcome, error) {
	l, clock, err := newLimiter(v.policy)
	if err != nil {
		return nil, err
	}
	out := make([]outcome, 0, len(reqs))
	for _, r := range reqs {
		d, err := consume(l, clock, client, r.at)
		if err != nil {
			return nil, err
		}
		out = append(out, outcome{request: r, allowed: d.Allowed})
	}
	return out, nil
}

// phaseOf returns the window phase the engine gives identity for a window of
// the guide's length, read from the engine's own answers: a fixed window of 1
// per window, one request at epoch (admitted), a second one at epoch
// (denied): its RetryAfter runs to the end of the identity's window, which
// starts at a multiple of the window plus the phase.
func phaseOf(identity string) (time.Duration, error) {
	l, clock, err := newLimiter(limit.Policy{Algorithm: limit.FixedWindow, Limit: 1, Window: window})
	if err != nil {
		return 0, err
	}
	if _, err := consume(l, clock, identity, 0); err != nil {
		return 0, err
	}
	d, err := consume(l, clock, identity, 0)
	if err != nil {
		return 0, err
	}
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > window {
		return 0, fmt.Errorf("phase probe for %q: second request allowed=%v RetryAfter=%v, want denied with 0 < RetryAfter <= %v", identity, d.Allowed, d.RetryAfter, window)
	}
	return d.RetryAfter % window, nil
}

// boundaries returns the window starts of v for client in [0, span].
func boundaries(v variant, phase time.Duration) []time.Duration {
	if !v.window {
		return nil
	}
	first := time.Duration(0)
	if v.phased {
		first = phase
	}
	var bs []time.Duration
	for t := first; t <= span; t += window {
		bs = append(bs, t)
	}
	return bs
}

// maxIn returns the most requests admitted in any interval [t, t+d) and the
// first such t (always an admitted request's instant).
func maxIn(out []outcome, d time.Duration) (int, time.Duration) {
	best, at := 0, time.Duration(0)
	for i, o := range out {
		if !o.allowed {
			continue
		}
		n := 0
		for _, p := range out[i:] {
			if p.at >= o.at+d {
				break
			}
			if p.allowed {
				n++
			}
		}
		if n > best {
			best, at = n, o.at
		}
	}
	return best, at
}

// tally counts admitted and sent requests of one segment.
func tally(out []outcome, seg segment) (admitted, sent int) {
	for _, o := range out {
		if o.seg == seg {
			sent++
			if o.allowed {
				admitted++
			}
		}
	}
	return admitted, sent
}

// Many clients: herdClients identities, each sending herdRate requests per
// second for the whole span; what the service sees is the sum.
const (
	herdClients = 20
	herdEvery   = 100 * time.Millisecond // each client's request interval (10 per second)
)

// herdIdentity is the identity of the i-th client, 0-based.
func herdIdentity(i int) string { return fmt.Sprintf("client-%02d", i+1) }

// runHerd returns, for v, the requests admitted per second (summed over every
// client) in each second of the span.
func runHerd(v variant) ([]int, error) {
	l, clock, err := newLimiter(v.policy)
	if err != nil {
		return nil, err
	}
	perSecond := make([]int, span/time.Second)
	for t := time.Duration(0); t < span; t += herdEvery {
		for i := range herdClients {
			d, err := consume(l, clock, herdIdentity(i), t)
			if err != nil {
				return nil, err
			}
			if d.Allowed {
				perSecond[t/time.Second]++
			}
		}
	}
	return perSecond, nil
}

// Retry-After: one client that wants a request every obedientEvery, and that,
// when denied, waits exactly the Retry-After it is told (whole seconds, as
// the HTTP header carries it) and sends that request again.
const obedientEvery = 250 * time.Millisecond

// attempt is one request of the obedient client.
type attempt struct {
	at         time.Duration
	allowed    bool
	retryAfter time.Duration // Decision.RetryAfter, exact (ms)
	header     int64         // the Retry-After header value, seconds
	retry      bool          // sent because a Retry-After said so
}

// runObedient plays the obedient client against a fresh limiter of v.
func runObedient(v variant) ([]attempt, error) {
	l, clock, err := newLimiter(v.policy)
	if err != nil {
		return nil, err
	}
	var out []attempt
	retry := false
	for t := time.Duration(0); t < span; {
		d, err := consume(l, clock, client, t)
		if err != nil {
			return nil, err
		}
		a := attempt{at: t, allowed: d.Allowed, retry: retry}
		if d.Allowed {
			t += obedientEvery
		} else {
			a.retryAfter = d.RetryAfter
			a.header = limit.RetryAfterSeconds(d)
			t += time.Duration(a.header) * time.Second
		}
		retry = !d.Allowed
		out = append(out, a)
	}
	return out, nil
}
