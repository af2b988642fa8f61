package limit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

var errBackend = errors.New("backend unreachable")

// errStore fails every call, as an unreachable backend does.
var errStore = failingStore{errBackend}

// hangStore blocks until its context ends, as a backend that stopped
// answering does; it honours the deadline, as the Store contract requires.
type hangStore struct{}

func (hangStore) Take(ctx context.Context, _ *Op) (Result, error) {
	<-ctx.Done()
	return Result{}, ctx.Err()
}

// tally is an Observer that counts events by kind (observer_test.go has the
// recorder that keeps them in order).
type tally struct {
	mu        sync.Mutex
	decisions []DecisionEvent
	issues    map[Issue]int
	storeErrs int
}

func (r *tally) Decision(e DecisionEvent) {
	r.mu.Lock()
	r.decisions = append(r.decisions, e)
	r.mu.Unlock()
}

func (r *tally) ClientAddressIssue(_ string, i Issue) {
	r.mu.Lock()
	if r.issues == nil {
		r.issues = map[Issue]int{}
	}
	r.issues[i]++
	r.mu.Unlock()
}

func (r *tally) StoreError(string, FailureMode) {
	r.mu.Lock()
	r.storeErrs++
	r.mu.Unlock()
}

func (r *tally) StoreDuration(string, string, time.Duration) {}

func (r *tally) issue(i Issue) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.issues[i]
}

func (r *tally) events() []DecisionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]DecisionEvent(nil), r.decisions...)
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// epochMS is the tests' fixed instant: 2026-01-01T00:00:10.500Z.
var epochMS = time.Date(2026, 1, 1, 0, 0, 10, 500_000_000, time.UTC).UnixMilli()

// req is a request from one socket peer.
func req(peer, path string) Request {
	return Request{Method: http.MethodGet, Path: path, Route: path, Peer: peer}
}

func mustNew(t testing.TB, s Store, p Policy, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(s, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// headerOf applies resp's header fields to a fresh http.Header.
func responseHeader(resp Response) http.Header {
	h := http.Header{}
	resp.WriteHeaders(h)
	return h
}

// reset forgets every key of a mapStore (limiter_test.go).
func (s *mapStore) reset() {
	s.mu.Lock()
	clear(s.m)
	s.mu.Unlock()
}

// calls returns how many times Take was called.
func (s *mapStore) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takes
}

// stateMap is the store side of Take for the tests' fake stores (no
// expiry): it reads each quota's State, applies op at now and writes back
// what the store contract says (every State of an admitted Op; the changed,
// existing States of a Refund). Lookups with string(bytes) do not allocate;
// a new key does.
type stateMap map[string]*State

func (m stateMap) take(op *Op, now int64) Result {
	var sts [MaxQuotas]State
	for i := range op.N {
		if p := m[string(op.Quotas[i].Key)]; p != nil {
			sts[i] = *p
		}
	}
	res := op.Apply(&sts, now)
	if !res.Allowed {
		return res
	}
	for i := range op.N {
		if res.Quotas[i].TTLMS == 0 {
			continue
		}
		p := m[string(op.Quotas[i].Key)]
		if p == nil {
			if op.Refund {
				continue
			}
			p = new(State)
			m[string(op.Quotas[i].Key)] = p
		}
		*p = sts[i]
	}
	return res
}

// applyOne applies a one-quota op (Quotas[0]) to st at now: the new State
// (st itself when denied) and the quota's answer.
func applyOne(op *Op, st State, now int64) (State, QuotaResult) {
	sts := [MaxQuotas]State{st}
	res := op.Apply(&sts, now)
	return sts[0], res.Quotas[0]
}
