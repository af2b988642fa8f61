package guard

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// The key by which context finds a cancellable parent was learnt at init:
// without it, context.Cause of a store context would report the caller's
// cancellation, and a context derived from it would be cancelled with the
// caller.
func TestStoreCtxHidesTheCallersCancellation(t *testing.T) {
	if cancelCtxKey == nil {
		t.Fatal("context.Cause asked no key: the probe no longer finds the cancellable parent")
	}
	parent, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("client went away"))
	d := &deadline{done: make(chan struct{})}
	sc := &storeCtx{}
	sc.begin(parent, d, true)
	if err := context.Cause(sc); err != nil {
		t.Fatalf("context.Cause of a live store context: %v", err)
	}
	child, stop := context.WithCancel(sc)
	defer stop()
	if child.Err() != nil {
		t.Fatal("a context derived from the store context was cancelled with the caller")
	}
	d.close(whyStoreSilent)
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context derived from the store context did not end with it")
	}
	if !errors.Is(context.Cause(sc), context.DeadlineExceeded) || !errors.Is(sc.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the deadline: cause %v, err %v", context.Cause(sc), sc.Err())
	}
	// Over: a watcher left behind by the store's client sees a done context.
	sc.end()
	select {
	case <-sc.Done():
	default:
		t.Fatal("a call that is over has an open Done channel")
	}
	if sc.Err() == nil {
		t.Fatal("a call that is over has a nil Err")
	}
}

// panicAfterWait is a store that waits on its context (past watchAfter,
// so that its caller is watched), keeps it, then panics.
type panicAfterWait struct{ ctx context.Context }

func (p *panicAfterWait) Take(ctx context.Context, _ *limitstore.Op, _ *limitstore.Result) error {
	p.ctx = ctx
	select {
	case <-ctx.Done():
	case <-time.After(5 * watchAfter):
	}
	panic("store bug")
}

// A call whose store panics while its caller is watched is over all the
// same: the AfterFunc on the caller's context is stopped and the context
// dropped, so a long-lived caller context keeps nothing per such call.
func TestAPanickingCallStopsWatchingItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &panicAfterWait{}
		g, err := New(p, WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		worker, cancel := context.WithCancel(context.Background())
		defer cancel()
		op := &limitstore.Op{Cost: 1, N: 1}
		op.Quotas[0] = limitstore.Quota{Key: []byte("k"), Algorithm: limitstore.FixedWindow, Limit: 10, WindowMS: 1000}
		func() {
			defer func() { _ = recover() }()
			var res limitstore.Result
			_ = g.Take(worker, op, &res)
		}()
		sc, ok := p.ctx.(*storeCtx)
		if !ok {
			t.Fatalf("the store was called with a %T, want the guard's *storeCtx", p.ctx)
		}
		if sc.stop != nil || sc.parent != nil {
			t.Fatalf("after the panicking call: AfterFunc kept %v, caller's context kept %v", sc.stop != nil, sc.parent != nil)
		}
	})
}
