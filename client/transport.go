package limitclient

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// maxDrain bounds how much of a retried response's body is read so that its
// connection can be reused; a longer body's connection is closed.
const maxDrain = 64 << 10

// New returns an http.RoundTripper that sends requests through base (nil:
// http.DefaultTransport) and follows what the servers say about their rate
// limits:
//
//   - Before sending, a request whose partition's quota is spent (the last
//     answer said so: a 429, or RateLimit r=0, or RateLimit-Remaining: 0)
//     waits until the time it was told. A partition is the request's host
//     unless WithPartition says otherwise; one partition's limit never
//     delays another's requests.
//   - A 429 Too Many Requests is retried, up to WithMaxRetries times, when
//     the request can be sent again: its method is GET, HEAD, OPTIONS,
//     TRACE, PUT or DELETE, or it carries an Idempotency-Key or
//     X-Idempotency-Key header, and its body is empty or can be replayed
//     (Request.GetBody), or it has GetBody whatever its method. The wait is
//     the response's Retry-After, else what its rate-limit fields say, else
//     a jittered exponential backoff from DefaultBackoff.
//   - With WithRetry503, a 503 is retried the same way after a jittered
//     exponential backoff, never shorter than its Retry-After.
//   - No wait is longer than the MaxWait (WithMaxWait, DefaultMaxWait) or
//     ends after the request context's deadline. A 429 whose wait would be is
//     returned to the caller at once; a wait before sending that would be
//     sends the request at once. A context done during a wait ends it, and
//     RoundTrip returns the context's error.
//
// Every value read from a header is bounded; see the package documentation
// for what each odd value means. The transport allocates nothing per request
// while its partition has no spent quota, beyond what base allocates. It is
// safe for concurrent use, and keeps its state (one instant per partition,
// at most WithMaxPartitions of them) for its whole life: share one per
// client. It forwards CloseIdleConnections to base.
//
// New panics on an invalid Option, with a message naming it: options are
// program constants, and the signature of an http.RoundTripper constructor
// leaves no room for an error.
func New(base http.RoundTripper, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	c := config{
		maxWait:       DefaultMaxWait,
		maxRetries:    DefaultMaxRetries,
		maxPartitions: DefaultMaxPartitions,
		now:           time.Now,
		sleep:         sleepTimer,
		jitter:        rand.Int64N,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&c); err != nil {
			panic("limitclient: " + err.Error())
		}
	}
	t := &transport{base: base, cfg: c, epoch: c.now()}
	t.parts.max = c.maxPartitions
	return t
}

type transport struct {
	base  http.RoundTripper
	cfg   config
	epoch time.Time // the zero of partition instants
	parts partitions
}

// CloseIdleConnections closes the idle connections of the base transport,
// when it has such a method (http.Client.CloseIdleConnections calls it).
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	key := t.key(req)
	r := req
	for attempt := 0; ; attempt++ {
		if err := t.waitSpent(ctx, key); err != nil {
			if r.Body != nil {
				r.Body.Close() // a RoundTripper closes the body, errors included
			}
			return nil, err
		}
		resp, err := t.base.RoundTrip(r)
		if err != nil {
			return resp, err
		}
		wait, retry := t.observe(key, resp, attempt)
		if !retry || attempt >= t.cfg.maxRetries || !replayable(req) || !t.fits(ctx, wait) {
			return resp, nil
		}
		next, err := again(ctx, req)
		if err != nil {
			return resp, nil // the body cannot be replayed: the caller gets the answer
		}
		if resp.Body == nil { // a base that breaks the RoundTripper contract
			resp.Body = http.NoBody
		}
		drained := drain(resp)
		err = t.cfg.sleep(ctx, wait)
		finish(ctx, resp, drained)
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			if next.Body != nil {
				next.Body.Close()
			}
			return nil, err
		}
		r = next
	}
}

// key returns the request's partition key; a panicking partition function
// falls back to the host.
func (t *transport) key(req *http.Request) (key string) {
	if t.cfg.partition != nil {
		defer func() {
			if recover() != nil {
				key = host(req)
			}
		}()
		return t.cfg.partition(req)
	}
	return host(req)
}

func host(req *http.Request) string {
	if req.URL != nil && req.URL.Host != "" {
		return req.URL.Host
	}
	return req.Host
}

// mono is now on the transport's clock, in nanoseconds since New.
func (t *transport) mono(now time.Time) int64 { return int64(now.Sub(t.epoch)) }

// waitSpent waits while key's partition is spent. A wait longer than the
// MaxWait or past ctx's deadline is not started (the request goes out and
// the server answers); ctx done during the wait returns its error.
func (t *transport) waitSpent(ctx context.Context, key string) error {
	p := t.parts.get(key)
	if p == nil {
		return nil
	}
	until := p.until.Load()
	wait := time.Duration(until - t.mono(t.cfg.now()))
	if wait <= 0 || !t.fits(ctx, wait) {
		return nil
	}
	return t.cfg.sleep(ctx, wait)
}

// fits reports whether a wait of d is at most the MaxWait and ends before
// ctx's deadline.
func (t *transport) fits(ctx context.Context, d time.Duration) bool {
	if d > t.cfg.maxWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && !t.cfg.now().Add(d).Before(dl) {
		return false
	}
	return true
}

// observe records what resp says about key's partition and returns the wait
// before sending the request again, and whether its status asks for that.
func (t *transport) observe(key string, resp *http.Response, attempt int) (time.Duration, bool) {
	now := t.cfg.now()
	hint, spentOK := spent(resp.Header, now)
	var wait time.Duration
	retry := false
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		retry = true
		if ra, ok := retryAfter(resp.Header, now); ok {
			wait = ra
		} else if spentOK {
			wait = hint
		} else {
			wait = t.backoff(DefaultBackoff, attempt)
		}
		hint, spentOK = wait, true
	case http.StatusServiceUnavailable:
		if t.cfg.retry503 > 0 {
			retry = true
			wait = t.backoff(t.cfg.retry503, attempt)
			if ra, ok := retryAfter(resp.Header, now); ok {
				wait = max(wait, ra)
			}
		}
	}
	// A hint past the MaxWait is not remembered: no request would wait for
	// it, and held as the partition's instant it would outlast every
	// shorter hint after it (an instant never moves earlier) and keep its
	// place in the table.
	if spentOK && hint > 0 && hint <= t.cfg.maxWait {
		m := t.mono(now)
		if p := t.parts.get(key); p != nil {
			p.extend(m + int64(hint))
		} else if p := t.parts.create(key, m); p != nil {
			p.extend(m + int64(hint))
		}
	}
	return wait, retry
}

// backoff is a jittered exponential backoff: uniform in [b/2, b] for
// b = base * 2^attempt, at most the MaxWait.
func (t *transport) backoff(base time.Duration, attempt int) time.Duration {
	b := t.cfg.maxWait
	if attempt < 32 && base <= t.cfg.maxWait>>attempt {
		b = base << attempt
	}
	half := b / 2
	return half + time.Duration(t.cfg.jitter(int64(b-half)+1))
}

// replayable reports whether req may be sent again: an idempotent method
// (RFC 9110 9.2.2) or an idempotency key, with a body that is empty or can
// be replayed; or any method whose body can be replayed.
func replayable(req *http.Request) bool {
	if req.GetBody != nil {
		return true
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// again returns a copy of req for another attempt, with a fresh body.
func again(ctx context.Context, req *http.Request) (*http.Request, error) {
	next := req.Clone(ctx)
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// closeGrace bounds how long a retry waits, after closing a response's
// body, for the reader of drain to return.
const closeGrace = time.Second

// finish closes resp's body, which ends a read of drain still going, and
// waits for drain's reader to return, at most until ctx is done or for
// closeGrace: a body whose Close does not end a Read in progress, or
// blocks behind it (io.ReadCloser promises neither), is left to its reader
// and holds up no caller.
func finish(ctx context.Context, resp *http.Response, drained <-chan struct{}) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		resp.Body.Close()
	}()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	for drained != nil || closed != nil {
		select {
		case <-drained:
			drained = nil
		case <-closed:
			closed = nil
		case <-ctx.Done():
			return
		case <-grace.C:
			return
		}
	}
}

// drain reads up to maxDrain bytes of resp's body in the background while
// the caller waits to retry, so that its connection can be reused; the
// caller then closes the body, which ends a read still going (a body that
// never ends holds nothing past the wait), and waits on the returned
// channel for the reader to return (finish).
func drain(resp *http.Response) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.CopyN(io.Discard, resp.Body, maxDrain)
	}()
	return done
}
