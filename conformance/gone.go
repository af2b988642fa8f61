package conformance

import (
	"context"
	"net"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// CheckClientGone checks, through h over a real socket, that a client that
// goes away while its request's decision waits on a slow store releases
// that decision at once: the store answers after 5 s (behind a guard with
// a 10 s timeout), the client closes its connection once the store was
// asked, and the Limiter's store call returns within 500 ms of the close;
// the policy is FailOpen, and the handler does not run (a client cannot
// cancel its way past the limit). An adapter whose framework never cancels
// a request's context when its client leaves (fasthttp: fiber v2 and v3)
// passes it by watching the connection (package connctx).
func CheckClientGone(t *testing.T, h Harness) {
	asked := make(chan struct{}, 1)
	returned := make(chan time.Time, 1)
	slow := &askedStore{Store: limittest.SlowStore{Store: limittest.NewStore(nil), Delay: 5 * time.Second}, asked: asked}
	g, err := guard.New(slow, guard.WithTimeout(10*time.Second), guard.WithoutDenyCache())
	if err != nil {
		t.Fatal(err)
	}
	l, err := limit.New(&returnStore{Store: g, returned: returned}, limit.Policy{Limit: 5, FailureMode: limit.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	route := &Route{Method: "GET", Path: "/a"}
	base, _ := serve(t, h, &App{Global: []*limit.Limiter{l}, Routes: []*Route{route}})
	c, err := net.DialTimeout("tcp", base[len("http://"):], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET /a HTTP/1.1\r\nHost: conformance\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the store was never asked")
	}
	closed := time.Now()
	c.Close()
	select {
	case at := <-returned:
		if el := at.Sub(closed); el > 500*time.Millisecond {
			t.Errorf("the decision returned %v after the client left, want within 500 ms", el)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the decision was still waiting on the store 3 s after the client left")
	}
	time.Sleep(50 * time.Millisecond) // the adapter's next step, had it run the handler
	if n := route.Hits(); n != 0 {
		t.Errorf("the handler ran %d times for a client that left", n)
	}
}

// askedStore signals each call on asked before passing it on.
type askedStore struct {
	limitstore.Store
	asked chan struct{}
}

func (s *askedStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *askedStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	select {
	case s.asked <- struct{}{}:
	default:
	}
	return limittest.Take(ctx, s.Store, op)
}

// returnStore records when each call returned.
type returnStore struct {
	limitstore.Store
	returned chan time.Time
}

func (s *returnStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *returnStore) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	res, err := limittest.Take(ctx, s.Store, op)
	select {
	case s.returned <- time.Now():
	default:
	}
	return res, err
}
