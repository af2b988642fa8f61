package limit

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// idStore is a minimal in-process Store for the engine's own tests: a map of
// states under one mutex, at a settable clock reading. Entries are pointers
// so that deciding for a present key does not allocate.
type idStore struct {
	mu  sync.Mutex
	m   stateMap
	now int64 // Unix ms
}

func newIDStore() *idStore {
	return &idStore{m: map[string]*State{}, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()}
}

func (s *idStore) Take(_ context.Context, op *Op) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.take(op, s.now), nil
}

func (*idStore) InProcess() {}

// keys returns the store keys written so far.
func (s *idStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.m))
	for k := range s.m {
		out = append(out, k)
	}
	return out
}

// idObserver records the engine's events.
type idObserver struct {
	mu        sync.Mutex
	issues    []Issue
	decisions []DecisionEvent
}

func (o *idObserver) Decision(e DecisionEvent) {
	o.mu.Lock()
	o.decisions = append(o.decisions, e)
	o.mu.Unlock()
}

func (o *idObserver) ClientAddressIssue(_ string, issue Issue) {
	o.mu.Lock()
	o.issues = append(o.issues, issue)
	o.mu.Unlock()
}

func (o *idObserver) StoreError(string, FailureMode)              {}
func (o *idObserver) StoreDuration(string, string, time.Duration) {}

func (o *idObserver) issueCount(kind Issue) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, i := range o.issues {
		if i == kind {
			n++
		}
	}
	return n
}

func (o *idObserver) keySources() []KeySource {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]KeySource, len(o.decisions))
	for i, d := range o.decisions {
		out[i] = d.KeySource
	}
	return out
}

// headerOf builds an http.Header from "Name: value" lines, in order; each
// element is one header line.
func headerOf(lines ...string) http.Header {
	if len(lines) == 0 {
		return nil
	}
	h := http.Header{}
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ": ")
		if !ok {
			name, value, _ = strings.Cut(l, ":")
		}
		h.Add(name, value)
	}
	return h
}

// deriveIdentity runs the identity derivation of a Limiter built with opts
// and policy p for one request and returns the key source, the identity's
// key form ("r:..." or "h:...") and the issues reported.
func deriveIdentity(t testing.TB, p Policy, opts []Option, peer string, h http.Header) (KeySource, string, []Issue) {
	t.Helper()
	obs := &idObserver{}
	l, err := New(newIDStore(), p, append(append([]Option(nil), opts...), WithObserver(obs))...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	sc := &scratch{}
	var hdr Header
	if h != nil {
		hdr = h
	}
	src := l.identity(&Request{Peer: peer, Header: hdr}, l.shared, sc)
	return src, string(sc.id), obs.issues
}
