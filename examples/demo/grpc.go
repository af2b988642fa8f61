package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcRow is one line of the gRPC table: one client on one method.
type grpcRow struct {
	method, client    string
	sent, ok, limited int
	other             []string
	// delay is the first denial's RetryInfo delay (-1: none) and
	// retryAfter its retry-after metadata.
	delay      time.Duration
	retryAfter string
}

// runGRPC starts examples/grpc and drives it with grpc's own client from
// several loopback addresses, checking the codes, the RetryInfo delays and
// the metadata against the example's policies.
func runGRPC() error {
	addr, banner, stop, err := start(grpcServer, "-disclosure", "always")
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println("server:", banner)
	fmt.Println("store: memory, the embedded default (nothing to install)")

	var rows []grpcRow
	type rpc = func(testpb.TestServiceClient, context.Context, *metadata.MD) error
	callAt := func(at, method, client string, n int, do rpc, kv ...string) grpcRow {
		r := grpcRow{method: method, client: client, delay: -1}
		c, closeConn, err := grpcClient(at, client)
		if err != nil {
			r.other = append(r.other, err.Error())
			rows = append(rows, r)
			return r
		}
		defer closeConn()
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if len(kv) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, kv...)
			}
			var md metadata.MD
			err := do(testpb.NewTestServiceClient(c), ctx, &md)
			cancel()
			r.sent++
			switch status.Code(err) {
			case codes.OK:
				r.ok++
			case codes.ResourceExhausted:
				r.limited++
				if r.delay < 0 {
					r.delay = retryInfo(err)
					r.retryAfter = strings.Join(md.Get("retry-after"), ",")
				}
			default:
				r.other = append(r.other, err.Error())
			}
		}
		rows = append(rows, r)
		return r
	}
	call := func(method, client string, n int, do rpc, kv ...string) grpcRow {
		return callAt(addr, method, client, n, do, kv...)
	}
	empty := func(c testpb.TestServiceClient, ctx context.Context, md *metadata.MD) error {
		_, err := c.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(md))
		return err
	}
	unary := func(c testpb.TestServiceClient, ctx context.Context, md *metadata.MD) error {
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(md))
		return err
	}
	search := func(size int32) rpc {
		return func(c testpb.TestServiceClient, ctx context.Context, md *metadata.MD) error {
			_, err := c.CacheableUnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}, grpc.Header(md))
			return err
		}
	}
	export := func(c testpb.TestServiceClient, ctx context.Context, md *metadata.MD) error {
		s, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}}})
		if err != nil {
			return err
		}
		for {
			_, err := s.Recv()
			if err == nil {
				continue
			}
			*md, _ = s.Header()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}

	// The fixed window of UnaryCall rolls at one instant of each minute per
	// client: a burst that does not come out as promised is repeated once
	// from a spare address (a fault fails both).
	loginClient := "127.0.0.2"
	login := call("TestService/UnaryCall", loginClient, 8, unary)
	if login.ok != 5 || login.limited != 3 {
		fmt.Printf("UnaryCall from %s: %d OK, %d ResourceExhausted; its fixed window may have rolled: again from 127.0.0.20\n", loginClient, login.ok, login.limited)
		loginClient = "127.0.0.20"
		login = call("TestService/UnaryCall", loginClient, 8, unary)
	}
	loginB := call("TestService/UnaryCall", "127.0.0.3", 3, unary)
	searchRow := call("TestService/CacheableUnaryCall", "127.0.0.4", 8, search(0))
	expensive := call("TestService/CacheableUnaryCall response_size=1", "127.0.0.6", 3, search(1))
	notes := call("TestService/EmptyCall", "127.0.0.5", 105, empty)
	exportPro := call("TestService/StreamingOutputCall x-api-key: pro-demo", "127.0.0.12", 22, export, "x-api-key", "pro-demo")
	exportFree := call("TestService/StreamingOutputCall x-api-key: free-demo", "127.0.0.13", 7, export, "x-api-key", "free-demo")

	// The health service is not limited, even for a client whose global
	// allowance is spent.
	healthOK, healthErr := 0, ""
	if c, closeConn, err := grpcClient(addr, "127.0.0.5"); err == nil {
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil {
				healthOK++
			} else {
				healthErr = err.Error()
			}
		}
		closeConn()
	}

	// One client stream of 25 messages: the 21st is limited (20 received
	// messages per 60 s), which ends the stream.
	upload, uploadTrailer, uploadErr := uploadStream(addr, "127.0.0.7", 25)

	// The stacked interceptors: loginClient's 3 limited UnaryCalls charged
	// the global limit nothing, so one more call shows r=94 (100 - 5 - itself).
	var stackedRL string
	stacked := call("TestService/EmptyCall (after 8 UnaryCalls)", loginClient, 1, func(c testpb.TestServiceClient, ctx context.Context, md *metadata.MD) error {
		err := empty(c, ctx, md)
		stackedRL = strings.Join(md.Get("ratelimit"), ", ")
		return err
	})

	// The same server with -shadow: every limiter decides and counts, none
	// limits.
	fmt.Println("\nthe same server again with -shadow (its log lines, if any, follow):")
	shadowAddr, _, stopShadow, err := start(grpcServer, "-shadow")
	if err != nil {
		return err
	}
	defer stopShadow()
	shadowLogin := callAt(shadowAddr, "-shadow: TestService/UnaryCall", "127.0.0.2", 8, unary)
	shadowUpload, _, shadowUploadErr := uploadStream(shadowAddr, "127.0.0.2", 25)

	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tCLIENT\tSENT\tOK\tRESOURCE_EXHAUSTED\tOTHER\tFIRST RETRY DELAY (retry-after)")
	for _, r := range rows {
		d := "-"
		if r.delay >= 0 {
			d = fmt.Sprintf("%v (%s)", r.delay, r.retryAfter)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.method, r.client, r.sent, r.ok, r.limited, len(r.other), d)
	}
	tw.Flush()
	fmt.Printf("TestService/StreamingInputCall from 127.0.0.7: one stream of 25 messages: %d received, then %v (trailer retry-after %q)\n",
		upload, status.Code(uploadErr), uploadTrailer.Get("retry-after"))
	fmt.Printf("grpc.health.v1.Health/Check from 127.0.0.5 after its 100 calls: %d x OK%s\n", healthOK, others(slices.DeleteFunc([]string{healthErr}, func(e string) bool { return e == "" })))
	fmt.Printf("EmptyCall from %s after its 8 UnaryCalls: ratelimit: %s\n\n", loginClient, stackedRL)

	var problems []string
	check := func(ok bool, msg string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			problems = append(problems, msg)
		}
		fmt.Println(mark, msg)
	}
	delayMatches := func(r grpcRow) bool {
		secs, err := strconv.Atoi(r.retryAfter)
		return err == nil && r.delay == time.Duration(secs)*time.Second && secs >= 1
	}
	check(login.ok == 5 && login.limited == 3, "UnaryCall: client "+loginClient+" gets 5 x OK, then ResourceExhausted (fixed window 5/60s per method)")
	check(delayMatches(login) && login.delay <= time.Minute, fmt.Sprintf("UnaryCall: the RetryInfo delay (%v) is the retry-after metadata (%s s), at most the 60 s window", login.delay, login.retryAfter))
	check(loginB.ok == 3 && loginB.limited == 0, "UnaryCall: client 127.0.0.3 still gets OK while "+loginClient+" is limited")
	check(searchRow.ok >= 5 && searchRow.limited >= 1 && delayMatches(searchRow) && searchRow.delay == time.Second,
		fmt.Sprintf("CacheableUnaryCall: burst of 5, then ResourceExhausted with a 1 s retry delay (token bucket 1/s): %v", searchRow.delay))
	check(expensive.ok >= 1 && expensive.limited >= 1 && expensive.ok < 3, "CacheableUnaryCall: response_size > 0 costs 3 of the burst of 5")
	check(notes.ok == 100 && notes.limited == 5 && delayMatches(notes), "EmptyCall: the global 100/60s per peer; call 101 gets ResourceExhausted with RetryInfo")
	check(healthOK == 3, "health: not limited, even for a limited client")
	check(exportPro.ok == 20 && exportPro.limited == 2, "StreamingOutputCall: a pro- key gets 20 streams per 60 s (plan pro), charged when each opens")
	check(exportFree.ok == 5 && exportFree.limited == 2, "StreamingOutputCall: another key gets 5 per 60 s (the default plan)")
	check(upload == 20 && status.Code(uploadErr) == codes.ResourceExhausted && retryInfo(uploadErr) > 0 && len(uploadTrailer.Get("retry-after")) == 1,
		"StreamingInputCall: 20 messages received, the 21st ends the stream with ResourceExhausted, RetryInfo and retry-after in the trailer")
	check(shadowLogin.ok == 8 && shadowUpload == 25 && shadowUploadErr == nil,
		fmt.Sprintf("-shadow: nothing limited (8 of 8 UnaryCalls OK, %d of 25 messages received)", shadowUpload))
	check(stacked.ok == 1 && strings.Contains(stackedRL, `"100p60";r=94;`), "stacked interceptors: the 3 limited UnaryCalls charged the global limit nothing (r=94, not 91)")
	for _, r := range rows {
		check(len(r.other) == 0, fmt.Sprintf("%s from %s: no code other than OK/ResourceExhausted%s", r.method, r.client, others(r.other)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("\ndemo passed: the limiter admitted and denied exactly as configured")
	return nil
}

// grpcClient returns a connection to addr dialing from the loopback
// address from, so that the server sees its own socket peer.
func grpcClient(addr, from string) (*grpc.ClientConn, func(), error) {
	local := &net.TCPAddr{IP: net.ParseIP(from)}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: local}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		return nil, nil, err
	}
	return cc, func() { cc.Close() }, nil
}

// uploadStream sends n messages on one StreamingInputCall from client and
// returns how many the server received (the example's x-received-messages
// trailer), the trailer and the stream's error.
func uploadStream(addr, client string, n int) (int, metadata.MD, error) {
	cc, closeConn, err := grpcClient(addr, client)
	if err != nil {
		return 0, nil, err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := testpb.NewTestServiceClient(cc).StreamingInputCall(ctx)
	if err != nil {
		return 0, nil, err
	}
	for range n {
		if err := s.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte{1}}}); err != nil {
			break // the server ended the stream; CloseAndRecv has its status
		}
	}
	_, err = s.CloseAndRecv()
	tr := s.Trailer()
	got := -1
	if v := tr.Get("x-received-messages"); len(v) == 1 {
		got, _ = strconv.Atoi(v[0])
	}
	return got, tr, err
}

// retryInfo returns the RetryInfo delay of err's status, -1 without one.
func retryInfo(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// others is the codes a row got besides OK and ResourceExhausted, for its
// check line: "" when there were none.
func others(codes []string) string {
	if len(codes) == 0 {
		return ""
	}
	return " (got " + strings.Join(codes, ", ") + ")"
}
