package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
)

// prefixOnce fails t unless err's text starts with "redisstore: " and
// holds it once (an error of the engine's circuit breaker quotes the
// store's: it holds it once, not at the start).
func prefixOnce(t *testing.T, where string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	const p = "redisstore: "
	if n := strings.Count(msg, p); n != 1 || (!strings.HasPrefix(msg, p) && !errors.Is(err, limitstore.ErrCircuitOpen)) {
		t.Errorf("%s: error %q: want %q once, at the start", where, msg, p)
	}
}

// frozenListener accepts connections and never answers (a hung server, as
// the kernel sees it); it returns its address.
func frozenListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestRegressionErrorPrefixOnce: every error a caller of Store.Take, Ping,
// Limiter.Consume or Limiter.Check (OnStoreError) gets from the Redis
// store reads "redisstore: ..." with the prefix once, whichever path
// produced it, and errors.Is still finds the sentinels. Before the fix a
// dial gate refusal read "redisstore: redisstore: not reconnecting yet"
// (rueidis passes the gate's error through, and decide or a flight added
// the prefix again) and a Store not yet connected "redisstore: not
// connected to Redis yet: redisstore: not reconnecting yet".
func TestRegressionErrorPrefixOnce(t *testing.T) {
	t.Run("straight-call", func(t *testing.T) {
		mr := miniBackendServer(t)
		s := newStore(t, miniBackendOf(mr))
		op := ttlOps(testPrefix(t), "x")[0]
		ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		_, err := limittest.Take(ctx, s, &op)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Take with an expired context: %v, want context.DeadlineExceeded", err)
		}
		prefixOnce(t, "expired context", err)
		mr.Lpush(string(op.Quotas[0].Key), "a list") // WRONGTYPE for the script
		_, err = limittest.Take(context.Background(), s, &op)
		if err == nil {
			t.Fatal("Take on a key holding a list: no error")
		}
		prefixOnce(t, "WRONGTYPE", err)
	})
	t.Run("closed", func(t *testing.T) {
		s := newStore(t, miniBackend(t))
		s.Close()
		op := ttlOps(testPrefix(t), "x")[0]
		_, err := limittest.Take(context.Background(), s, &op)
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Take after Close: %v, want ErrClosed", err)
		}
		prefixOnce(t, "closed", err)
		prefixOnce(t, "Ping after Close", s.Ping(context.Background()))
	})
	t.Run("not-connected-gate-refusal", func(t *testing.T) {
		// The first connection gets no answer (dial_timeout), so the gate
		// refuses the background reconnects for 1 s: the Store is not
		// connected, and its last connection error is the gate's.
		s, err := NewFromURL("redis://"+frozenListener(t)+"?dial_timeout=50ms", WithoutGuard()) // the raw paths: no breaker between the polls
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		op := ttlOps(testPrefix(t), "x")[0]
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err = limittest.Take(context.Background(), s, &op)
			prefixOnce(t, "Take before connecting", err)
			if errors.Is(err, ErrReconnectBackoff) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Take: %v after 5 s, want ErrNotConnected wrapping ErrReconnectBackoff", err)
			}
			time.Sleep(10 * time.Millisecond) // polling the background connect
		}
		if !errors.Is(err, ErrNotConnected) {
			t.Fatalf("Take: %v, want ErrNotConnected too", err)
		}
		prefixOnce(t, "Ping before connecting", s.Ping(context.Background()))
		var hooked []error
		lim, err := limit.New(s, limit.Policy{Limit: 10, Window: time.Minute, FailureMode: limit.FailOpen,
			OnStoreError: func(_ context.Context, _ limit.Request, err error) { hooked = append(hooked, err) }}, limit.WithKeyPrefix("errprefix"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = lim.Consume(context.Background(), "client")
		if !errors.Is(err, ErrReconnectBackoff) {
			t.Fatalf("Consume: %v, want the store's error", err)
		}
		prefixOnce(t, "Consume", err)
		lim.Check(context.Background(), limit.Request{Method: "GET", Path: "/", Peer: "192.0.2.1:1234"}, limittest.Discard)
		if len(hooked) != 2 {
			t.Fatalf("OnStoreError called %d times, want 2", len(hooked))
		}
		for _, err := range hooked {
			prefixOnce(t, "OnStoreError", err)
		}
	})
	t.Run("frozen-server", func(t *testing.T) {
		// A real server frozen (SIGSTOP) under concurrent Takes: straight
		// calls and flights time out, queued Takes give up, the
		// connections drop and rueidis redials, and the gate refuses the
		// address: each of those errors, on either path. The test drops
		// the connections itself (a proxy's, as the network would):
		// rueidis's keepalive PING goes only on a connection with no
		// command waiting, so while Takes keep coming it never finds the
		// frozen server silent, and in 6 of 40 runs no connection was
		// redialled (no refusal) in 10 s.
		srv := redisfault.Start(t)
		proxy := redisfault.NewProxy(t, srv.Addr())
		s, err := NewFromURL(proxy.URL() + "?dial_timeout=200ms&write_timeout=100ms")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ops := ttlOps(testPrefix(t), "frozen")
		// The default 100 ms store timeout stays (the frozen phase's
		// 150 ms callers must be able to probe the breaker), so on a
		// loaded machine a warm-up round trip may time out: it retries.
		for i := range ops {
			takeRetry(t, s, &ops[i])
		}
		srv.Freeze()
		defer srv.Thaw()
		proxy.DropConns()
		var mu sync.Mutex
		var errs []error
		refused, after := false, 0
		for deadline := time.Now().Add(10 * time.Second); after < 3 && time.Now().Before(deadline); {
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
					defer cancel()
					op := ops[i%len(ops)]
					if _, err := limittest.Take(ctx, s, &op); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			mu.Lock()
			for _, err := range errs {
				refused = refused || errors.Is(err, ErrReconnectBackoff)
			}
			mu.Unlock()
			if refused {
				after++
			}
		}
		if !refused {
			t.Fatalf("no Take was refused by the dial gate in 10 s of a frozen server (%d errors)", len(errs))
		}
		kinds := map[string]int{}
		for _, err := range errs {
			prefixOnce(t, "Take against a frozen server", err)
			switch {
			case errors.Is(err, ErrReconnectBackoff):
				kinds["refused"]++
			case errors.Is(err, context.DeadlineExceeded):
				kinds["deadline"]++
			default:
				kinds[err.Error()]++
			}
		}
		t.Logf("%d errors: %v", len(errs), kinds)
	})
}
