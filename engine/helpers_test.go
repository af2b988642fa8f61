package limit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mapStore is an in-process Store for engine tests (the engine module cannot
// import memstore): a map under one mutex, with a settable clock in Unix ms.
type mapStore struct {
	mu    sync.Mutex
	m     map[string]*mapEntry
	now   atomic.Int64
	takes atomic.Int64
}

type mapEntry struct {
	st  State
	exp int64
}

func newMapStore(nowMS int64) *mapStore {
	s := &mapStore{m: make(map[string]*mapEntry)}
	s.now.Store(nowMS)
	return s
}

func (s *mapStore) Take(_ context.Context, op *Op) (Result, error) {
	s.takes.Add(1)
	now := s.now.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[string(op.Key)]
	var st State
	if e != nil && e.exp > now {
		st = e.st
	}
	next, res := op.Apply(st, now)
	if res.Allowed {
		if e == nil {
			e = new(mapEntry)
			s.m[string(op.Key)] = e
		}
		e.st, e.exp = next, now+res.TTLMS
	}
	return res, nil
}

func (s *mapStore) InProcess()              {}
func (s *mapStore) advance(d time.Duration) { s.now.Add(d.Milliseconds()) }

var errBackend = errors.New("backend unreachable")

// errStore fails every call, as an unreachable backend does.
type errStore struct{ calls atomic.Int64 }

func (s *errStore) Take(context.Context, *Op) (Result, error) {
	s.calls.Add(1)
	return Result{}, errBackend
}

// hangStore blocks until its context ends, as a backend that stopped
// answering does; it honours the deadline, as the Store contract requires.
type hangStore struct{}

func (hangStore) Take(ctx context.Context, _ *Op) (Result, error) {
	<-ctx.Done()
	return Result{}, ctx.Err()
}

// panicStore panics in Take.
type panicStore struct{}

func (panicStore) Take(context.Context, *Op) (Result, error) { panic("store bug") }

// recorder is an Observer that counts every event.
type recorder struct {
	mu        sync.Mutex
	decisions []DecisionEvent
	issues    map[Issue]int
	storeErrs int
}

func (r *recorder) Decision(e DecisionEvent) {
	r.mu.Lock()
	r.decisions = append(r.decisions, e)
	r.mu.Unlock()
}

func (r *recorder) ClientAddressIssue(_ string, i Issue) {
	r.mu.Lock()
	if r.issues == nil {
		r.issues = map[Issue]int{}
	}
	r.issues[i]++
	r.mu.Unlock()
}

func (r *recorder) StoreError(string, FailureMode) {
	r.mu.Lock()
	r.storeErrs++
	r.mu.Unlock()
}

func (r *recorder) StoreDuration(string, string, time.Duration) {}

func (r *recorder) issue(i Issue) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.issues[i]
}

func (r *recorder) events() []DecisionEvent {
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
func headerOf(resp Response) http.Header {
	h := http.Header{}
	resp.WriteHeaders(h)
	return h
}

func (s *mapStore) reset() {
	s.mu.Lock()
	clear(s.m)
	s.mu.Unlock()
}
