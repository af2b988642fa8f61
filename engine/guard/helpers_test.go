package guard_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

func mustNew(t testing.TB, s limitstore.Store, p limit.Policy, opts ...limit.Option) *limit.Limiter {
	t.Helper()
	l, err := limit.New(s, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// req is a GET of path from peer, routed as path.
func req(peer, path string) limit.Request {
	return limit.Request{Method: http.MethodGet, Path: path, Route: path, Peer: peer}
}

// response is what Check wrote.
type response struct {
	Decision limit.Decision
	Status   int
	Body     []byte
	Header   http.Header
}

// check decides r with l through Check and returns what it wrote.
func check(l *limit.Limiter, ctx context.Context, r limit.Request) response {
	w := limittest.NewWriter()
	d := l.Check(ctx, r, w)
	return response{Decision: d, Status: w.Status, Body: w.Body, Header: w.Header}
}

// assertNoAllocs fails when f allocates (without -race: the race detector
// allocates on its own).
func assertNoAllocs(t *testing.T, _ *limit.Limiter, f func()) {
	t.Helper()
	f() // warm: the store entry, the pools
	if limittest.RaceEnabled {
		t.Log("allocations not measured under -race")
		return
	}
	if a := testing.AllocsPerRun(1000, f); a != 0 {
		t.Fatalf("%v allocations per call, want 0", a)
	}
}

// ioStore is the reference store on clock now (bubble time when nil), named
// "io".
func ioStore(now func() time.Time) *limittest.Store {
	s := limittest.NewStore(now)
	s.Info = limitstore.Info{Name: "io"}
	return s
}

// scriptedStore passes calls to Store after a delay chosen per call (a
// negative delay: never, the call waits for its context), and counts calls.
// A delay of 0 is not available (SlowStore's "never"): the tests use 1 ms.
type scriptedStore struct {
	Store limitstore.Store
	delay func(op *limitstore.Op) time.Duration
	calls atomic.Int64
}

func (s *scriptedStore) Describe() limitstore.Info { return limitstore.Info{Name: "scripted"} }

func (s *scriptedStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *scriptedStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.calls.Add(1)
	d := s.delay(op)
	if d < 0 {
		d = 0 // SlowStore's "never"
	}
	return limittest.Take(ctx, limittest.SlowStore{Store: s.Store, Delay: d}, op)
}

// guarded wraps s with guard.New.
func guarded(t testing.TB, s limitstore.Store, opts ...guard.Option) *guard.Store {
	t.Helper()
	g, err := guard.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
