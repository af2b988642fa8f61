package connctx_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/connctx"
)

// pair returns the server's and the client's side of a loopback TCP
// connection.
func pair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// doneWithin reports whether ctx is done within d.
func doneWithin(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(d):
		return false
	}
}

func TestClientThatClosesEndsTheContext(t *testing.T) {
	for _, how := range []string{"close", "reset"} {
		t.Run(how, func(t *testing.T) {
			server, client := pair(t)
			ctx := connctx.New(context.Background(), server)
			defer ctx.End()
			if doneWithin(ctx, 100*time.Millisecond) {
				t.Fatal("done while the client is connected")
			}
			if how == "reset" {
				client.(*net.TCPConn).SetLinger(0) // close with RST
			}
			client.Close()
			if !doneWithin(ctx, 2*time.Second) {
				t.Fatal("not done 2 s after the client left")
			}
			if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), connctx.ErrClientGone) {
				t.Errorf("Err %v, Cause %v; want context.Canceled and ErrClientGone", ctx.Err(), context.Cause(ctx))
			}
		})
	}
}

// A peek takes nothing from the socket: what the client sent is still
// there for the server to read, and the watch stops (what follows the
// bytes cannot be seen without reading them).
func TestPeekLeavesTheBytesAndStops(t *testing.T) {
	server, client := pair(t)
	ctx := connctx.New(context.Background(), server)
	defer ctx.End()
	ctx.Done()
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // several peeks
	client.Close()
	if doneWithin(ctx, 200*time.Millisecond) {
		t.Error("done after the client sent more: the watch cannot tell")
	}
	server.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 64)
	n, err := server.Read(b)
	if err != nil || string(b[:n]) != "GET / HTTP/1.1\r\n" {
		t.Errorf("the server read %q, %v; want the client's bytes", b[:n], err)
	}
}

func TestEndEndsAndStopsWatching(t *testing.T) {
	server, client := pair(t)
	ctx := connctx.New(context.Background(), server)
	ctx.Done()
	ctx.End()
	ctx.End()
	if ctx.Err() == nil || errors.Is(context.Cause(ctx), connctx.ErrClientGone) {
		t.Fatalf("after End: Err %v, Cause %v; want canceled, not ErrClientGone", ctx.Err(), context.Cause(ctx))
	}
	client.Close()
	time.Sleep(60 * time.Millisecond) // no peek runs after End
	if errors.Is(context.Cause(ctx), connctx.ErrClientGone) {
		t.Error("a peek ran after End")
	}
}

// Before anything asks for Done there is no watch: a client that leaves
// then is not seen (End before Done ends nothing but the watch to come).
func TestNoWatchWithoutDone(t *testing.T) {
	server, client := pair(t)
	ctx := connctx.New(context.Background(), server)
	client.Close()
	time.Sleep(60 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("Err %v before any Done", ctx.Err())
	}
	ctx.End()
	if ctx.Done() != nil {
		t.Error("Done after End without a watch: want the parent's (nil for Background)")
	}
}

func TestParentsDeadlineValuesAndCancellation(t *testing.T) {
	type key struct{}
	server, _ := pair(t)
	at := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), at)
	ctx := connctx.New(parent, server)
	defer ctx.End()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(at) {
		t.Errorf("Deadline %v %v, want %v", d, ok, at)
	}
	if ctx.Value(key{}) != "v" {
		t.Error("the parent's value is not seen before Done")
	}
	ctx.Done()
	if ctx.Value(key{}) != "v" {
		t.Error("the parent's value is not seen after Done")
	}
	cancel()
	if !doneWithin(ctx, time.Second) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("the parent's cancellation: Err %v", ctx.Err())
	}
}

// context.AfterFunc of a watched Ctx runs when the client leaves.
func TestAfterFuncSeesTheClientLeave(t *testing.T) {
	server, client := pair(t)
	ctx := connctx.New(context.Background(), server)
	defer ctx.End()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	client.Close()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("AfterFunc did not run 2 s after the client left")
	}
}

func TestConnWithoutSocketIsNotWatched(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	ctx := connctx.New(context.Background(), a)
	if ctx.Done() != nil {
		t.Error("Done of a net.Pipe's Ctx: want the parent's (nil)")
	}
	b.Close()
	time.Sleep(50 * time.Millisecond)
	if ctx.Err() != nil {
		t.Errorf("Err %v", ctx.Err())
	}
	ctx.End()
}
