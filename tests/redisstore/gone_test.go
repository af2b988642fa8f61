package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// A caller that goes away while its script call waits on a slow Redis (a
// proxy holds every reply for 5 s; the store timeout is 10 s) is released
// within 500 ms, whether its Op went alone or queued for a flight (group
// commit), admitted by no failure mode; what its call did in Redis stays
// done (a call sent ran at once: its charge counts). The Store is fresh:
// it opened its connections before it was returned (a dial's handshake,
// which the proxy would hold, would hold its caller too).
func TestCallerThatGoesAwayIsReleased(t *testing.T) {
	srv := redisfault.Start(t)
	proxy := redisfault.NewProxy(t, srv.Addr())
	s, err := NewFromURL(proxy.URL(), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prefix := testPrefix(t)
	l, err := limit.New(s, limit.Policy{Limit: 1, FailureMode: limit.FailOpen}, limit.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(5 * time.Second)
	const callers = 6 // more than the calls a Store has out at once: some queue
	ctx, cancel := context.WithCancel(context.Background())
	type outcome struct {
		d   limit.Decision
		err error
		at  time.Time
		id  string
	}
	out := make(chan outcome, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			id := "client-" + string(rune('a'+i))
			d, err := l.Consume(ctx, id)
			out <- outcome{d, err, time.Now(), id}
		})
	}
	time.Sleep(100 * time.Millisecond) // every call sent or queued
	left := time.Now()
	cancel()
	wg.Wait()
	close(out)
	for o := range out {
		if el := o.at.Sub(left); el > 500*time.Millisecond {
			t.Errorf("%s: the decision returned %v after its caller left, want within 500 ms", o.id, el)
		}
		if o.d.Allowed || !errors.Is(o.err, context.Canceled) {
			t.Errorf("caller that left: %+v, %v; want nothing admitted and context.Canceled", o.d, o.err)
		}
	}
	direct, err := NewFromURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ld, err := limit.New(direct, limit.Policy{Limit: 1, FailureMode: limit.FailClosed}, limit.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	// The first two calls went out at once (the Store's two call slots):
	// their charges count. A queued Op was sent in a flight (charged) or
	// taken out of the queue unsent (not charged).
	charged := 0
	for i := range callers {
		d, err := ld.Consume(ctxT(t), "client-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			charged++
		}
	}
	if charged < 2 {
		t.Errorf("%d of the %d abandoned calls were charged, want at least the 2 sent at once", charged, callers)
	}
}
