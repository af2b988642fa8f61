package limittest

import (
	"slices"
	"sync"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// Recorder is a limit.Observer that keeps every event, in order. Recording
// an event copies only strings the engine already holds: it allocates
// nothing but the growth of its event list (see Reserve). The zero value is
// ready; it is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	kind      byte // 'd' decision, 'i' issue, 'r' refund, 'e' store error, 't' store duration, 's' store skipped, 'b' breaker
	open      bool
	decision  limit.DecisionEvent
	bucket    string
	issue     limit.Issue
	mode      limit.FailureMode
	store, op string
	d         time.Duration
}

var _ limit.Observer = (*Recorder)(nil)

func (r *Recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Decision records e.
func (r *Recorder) Decision(e limit.DecisionEvent) { r.add(event{kind: 'd', decision: e}) }

// Issue records an issue.
func (r *Recorder) Issue(bucket string, kind limit.Issue) {
	r.add(event{kind: 'i', bucket: bucket, issue: kind})
}

// Refund records a charge given back (op holds the reason).
func (r *Recorder) Refund(bucket, reason string) {
	r.add(event{kind: 'r', bucket: bucket, op: reason})
}

// StoreError records a failed store call.
func (r *Recorder) StoreError(bucket string, mode limit.FailureMode) {
	r.add(event{kind: 'e', bucket: bucket, mode: mode})
}

// StoreDuration records a store call's duration.
func (r *Recorder) StoreDuration(store, op string, d time.Duration) {
	r.add(event{kind: 't', store: store, op: op, d: d})
}

// StoreEvent records a decision that did not call the store (op holds
// the reason: "deny-cache", "breaker-open"), or a transition of a store's
// circuit breaker ("opened", "closed").
func (r *Recorder) StoreEvent(store, ev string) {
	switch ev {
	case "opened", "closed":
		r.add(event{kind: 'b', store: store, open: ev == "opened"})
	default:
		r.add(event{kind: 's', store: store, op: ev})
	}
}

// Skipped returns how many decisions did not call the store for reason
// ("deny-cache", "breaker-open").
func (r *Recorder) Skipped(reason string) int {
	return r.count(func(e event) bool { return e.kind == 's' && e.op == reason })
}

// Breaker returns the recorded breaker transitions, oldest first: true for
// open, false for closed.
func (r *Recorder) Breaker() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []bool
	for _, e := range r.events {
		if e.kind == 'b' {
			out = append(out, e.open)
		}
	}
	return out
}

// Decisions returns the recorded decisions, oldest first.
func (r *Recorder) Decisions() []limit.DecisionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []limit.DecisionEvent
	for _, e := range r.events {
		if e.kind == 'd' {
			out = append(out, e.decision)
		}
	}
	return out
}

// Last returns the newest recorded decision (the zero event when none).
func (r *Recorder) Last() limit.DecisionEvent {
	ds := r.Decisions()
	if len(ds) == 0 {
		return limit.DecisionEvent{}
	}
	return ds[len(ds)-1]
}

// Issues returns how many times issue was reported.
func (r *Recorder) Issues(issue limit.Issue) int {
	return r.count(func(e event) bool { return e.kind == 'i' && e.issue == issue })
}

// Refunds returns how many charges were given back for reason
// (limit.RefundLaterMount, limit.RefundStatus).
func (r *Recorder) Refunds(reason string) int {
	return r.count(func(e event) bool { return e.kind == 'r' && e.op == reason })
}

// StoreErrors returns how many failed store calls were reported.
func (r *Recorder) StoreErrors() int { return r.count(func(e event) bool { return e.kind == 'e' }) }

// Durations returns how many store calls were timed.
func (r *Recorder) Durations() int { return r.count(func(e event) bool { return e.kind == 't' }) }

func (r *Recorder) count(match func(event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if match(e) {
			n++
		}
	}
	return n
}

// Events returns every event, oldest first, as text:
//
//	decision <bucket>|<handler>|<outcome>|<key source>
//	issue <bucket>|<issue>
//	refund <bucket>|<reason>
//	store-error <bucket>|<failure mode>
//	duration <store>|<op>   ("negative duration <store>|<op>" when d < 0)
//	skipped <store>|<reason>
//	breaker <store>|open   (or |closed)
func (r *Recorder) Events() []string {
	r.mu.Lock()
	events := slices.Clone(r.events)
	r.mu.Unlock()
	out := make([]string, 0, len(events))
	for _, e := range events {
		switch e.kind {
		case 'd':
			d := e.decision
			out = append(out, "decision "+d.Bucket+"|"+d.Handler+"|"+string(d.Outcome)+"|"+string(d.KeySource))
		case 'i':
			out = append(out, "issue "+e.bucket+"|"+string(e.issue))
		case 'r':
			out = append(out, "refund "+e.bucket+"|"+e.op)
		case 'e':
			out = append(out, "store-error "+e.bucket+"|"+e.mode.String())
		case 't':
			s := "duration " + e.store + "|" + e.op
			if e.d < 0 {
				s = "negative " + s
			}
			out = append(out, s)
		case 's':
			out = append(out, "skipped "+e.store+"|"+e.op)
		case 'b':
			state := "closed"
			if e.open {
				state = "open"
			}
			out = append(out, "breaker "+e.store+"|"+state)
		}
	}
	return out
}

// Reset forgets every event, keeping the memory they took.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = r.events[:0]
	r.mu.Unlock()
}

// Reserve makes room for n more events, so that recording them allocates
// nothing (for allocation guards that run with a Recorder).
func (r *Recorder) Reserve(n int) {
	r.mu.Lock()
	r.events = slices.Grow(r.events, n)
	r.mu.Unlock()
}
