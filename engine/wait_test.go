package limit_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// feedPolicy is a token bucket of 5 per second, burst 1, whose requests
// wait up to 2 s for a slot: one every 200 ms.
func feedPolicy() limit.Policy {
	return limit.Policy{Name: "feed", Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second}
}

func TestMaxWaitRejected(t *testing.T) {
	store := limittest.NewStore(time.Now)
	for _, tc := range []struct {
		name string
		p    limit.Policy
		want []string
	}{
		{"sliding window", limit.Policy{MaxWait: time.Second}, []string{"MaxWait", "TokenBucket"}},
		{"fixed window", limit.Policy{Algorithm: limit.FixedWindow, MaxWait: time.Second}, []string{"MaxWait", "use TokenBucket"}},
		{"negative", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: -time.Second}, []string{"MaxWait", "negative"}},
		{"not whole ms", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: time.Second + time.Microsecond}, []string{"MaxWait", "milliseconds"}},
		{"over an hour", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: 61 * time.Minute}, []string{"MaxWait", "maximum"}},
		{"shadow", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: time.Second, Shadow: true}, []string{"MaxWait", "Shadow"}},
		{"MaxWaiting negative", limit.Policy{Algorithm: limit.TokenBucket, MaxWait: time.Second, MaxWaiting: -1}, []string{"MaxWaiting", "negative"}},
		{"MaxWaiting alone", limit.Policy{Algorithm: limit.TokenBucket, MaxWaiting: 5}, []string{"MaxWaiting", "MaxWait is 0"}},
		{"inexact", limit.Policy{Algorithm: limit.TokenBucket, Limit: 1 << 40, Window: time.Hour, Burst: 1, MaxWait: time.Hour}, []string{"MaxWait", "2^50"}},
	} {
		_, err := limit.New(store, tc.p)
		if !errors.Is(err, limit.ErrInvalidPolicy) {
			t.Errorf("%s: New: %v, want ErrInvalidPolicy", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// Requests sent at once are served one emission interval apart, in the
// order of their reservations, each after its wait; the first past
// MaxWait is limited at once, reserving nothing.
func TestMaxWaitServesInSlotOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &limittest.Recorder{}
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy(), limit.WithObserver(rec))
		ctx := context.Background()
		var waited []time.Duration
		var mu sync.Mutex
		var wg sync.WaitGroup
		// One at a time into the store (each reserves the slot after the
		// one before), then all waiting together.
		for range 11 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Consume(ctx, "client")
				if err != nil || !d.Allowed {
					t.Errorf("within MaxWait: %+v, %v", d, err)
				}
				mu.Lock()
				waited = append(waited, d.Waited)
				mu.Unlock()
			}()
			synctest.Wait()
		}
		d, _ := l.Consume(ctx, "client")
		if d.Allowed || d.Waited != 0 || d.RetryAfter != 2200*time.Millisecond {
			t.Fatalf("the 12th request (slot 2.2 s away, MaxWait 2 s): %+v; want limited at once, RetryAfter 2.2s", d)
		}
		wg.Wait()
		slices.Sort(waited)
		for i, w := range waited {
			if want := time.Duration(i) * 200 * time.Millisecond; w != want {
				t.Fatalf("request %d waited %v, want %v (waits %v)", i, w, want, waited)
			}
		}
		if n, longest := rec.Waits("feed", true); n != 10 || longest != 2*time.Second {
			t.Fatalf("Observer: %d waits served, longest %v; want 10, 2s", n, longest)
		}
		// Nothing was reserved by the limited one: the next slot is
		// right after the last waiter's.
		if d, _ := l.Consume(ctx, "client"); !d.Allowed || d.Waited != 200*time.Millisecond {
			t.Fatalf("after the waiters: %+v; want a wait of one interval", d)
		}
	})
}

// A waiter whose context ends gives its reservation back, exactly: the
// next request reserves the very slot it freed.
func TestMaxWaitCancelGivesTheSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &limittest.Recorder{}
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy(), limit.WithObserver(rec))
		if d, _ := l.Consume(context.Background(), "c"); !d.Allowed || d.Waited != 0 {
			t.Fatalf("first: %+v", d)
		}
		go l.Consume(context.Background(), "c") // slot at 200 ms
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan limit.Decision)
		go func() { d, _ := l.Consume(ctx, "c"); done <- d }() // slot at 400 ms
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		cancel()
		d := <-done
		if d.Allowed || d.Outcome != limit.OutcomeLimited || d.Waited != 100*time.Millisecond || d.RetryAfter != 300*time.Millisecond {
			t.Fatalf("cancelled waiter: %+v; want limited after 100ms, its slot 300ms away", d)
		}
		if n, _ := rec.Waits("c", false); n != 0 {
			t.Fatal("wrong bucket label")
		}
		if n, longest := rec.Waits("feed", false); n != 1 || longest != 100*time.Millisecond {
			t.Fatalf("Observer: %d given back, %v; want 1, 100ms", n, longest)
		}
		// Its slot (400 ms) is the next one: 300 ms from now.
		if d, _ := l.Consume(context.Background(), "c"); !d.Allowed || d.Waited != 300*time.Millisecond {
			t.Fatalf("after the cancellation: %+v; want the freed slot, 300ms away", d)
		}
	})
}

// A slot beginning after the context's deadline is not reserved: the
// request is limited at once and the slot stays free.
func TestMaxWaitHonoursTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, limittest.NewStore(time.Now), feedPolicy())
		l.Consume(context.Background(), "c")
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		if d, _ := l.Consume(ctx, "c"); d.Allowed || d.Waited != 0 || d.RetryAfter != 200*time.Millisecond {
			t.Fatalf("slot at 200 ms, deadline at 150 ms: %+v; want limited at once", d)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel2()
		if d, _ := l.Consume(ctx2, "c"); !d.Allowed || d.Waited != 200*time.Millisecond {
			t.Fatalf("slot at 200 ms, deadline at 250 ms: %+v; want served at its slot", d)
		}
	})
}

// Past MaxWaiting requests waiting at once, a request that would wait is
// limited at once and reserves nothing.
func TestMaxWaitingBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := feedPolicy()
		p.MaxWaiting = 2
		l := mustNew(t, limittest.NewStore(time.Now), p)
		ctx := context.Background()
		l.Consume(ctx, "c")
		for range 2 {
			go l.Consume(ctx, "c")
			synctest.Wait()
		}
		if d, _ := l.Consume(ctx, "c"); d.Allowed || d.Waited != 0 || d.RetryAfter != 600*time.Millisecond {
			t.Fatalf("a third waiter: %+v; want limited at once (RetryAfter 600ms: nothing reserved)", d)
		}
		time.Sleep(time.Second) // the two waiters are served
		if d, _ := l.Consume(ctx, "c"); !d.Allowed {
			t.Fatalf("after the waiters: %+v", d)
		}
	})
}

// A request that waited and was served gets the header fields of any
// admitted request; the handler runs after the wait (CheckHTTP returns
// then).
func TestMaxWaitHeadersAsAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := feedPolicy()
		p.Disclosure = limit.DiscloseAlways
		l := mustNew(t, limittest.NewStore(time.Now), p)
		first := checkHTTP(l, req("192.0.2.1:1", "/v1/feed"))
		start := time.Now()
		second := checkHTTP(l, req("192.0.2.1:1", "/v1/feed"))
		if second.Code != http.StatusOK || time.Since(start) != 200*time.Millisecond {
			t.Fatalf("second request: %d after %v; want admitted after 200ms", second.Code, time.Since(start))
		}
		for _, h := range []string{"Ratelimit-Policy", "Ratelimit"} {
			if first.Header().Get(h) == "" || second.Header().Get(h) == "" {
				t.Fatalf("%s: first %q, waited %q; want the field on both", h, first.Header().Get(h), second.Header().Get(h))
			}
		}
		if second.Header().Get("Retry-After") != "" {
			t.Fatalf("a served request carries Retry-After %q", second.Header().Get("Retry-After"))
		}
	})
}
