package guard

import (
	"context"
	"errors"
	"testing"
	"time"
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
