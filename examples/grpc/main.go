// Command grpc is the example API as a gRPC server with quotagate's
// interceptors (adapters/grpc). It serves two services of grpc's own, so
// that no code is generated here: the standard health service and grpc's
// interop TestService. The policies are the HTTP examples' where they apply:
//
//	grpc.health.v1.Health/*               not limited (SkipPaths)
//	TestService/EmptyCall                 global limit only: sliding window 100/60s per peer, Shared
//	TestService/UnaryCall                 + per-method fixed window 5/60s (the login limit)
//	TestService/CacheableUnaryCall        + per-method token bucket 1/s, burst 5; response_size > 0 costs 3 (the search limit)
//	TestService/StreamingOutputCall       + per x-api-key metadata: pro- keys 20/60s, others 5/60s, charged when the stream opens (the export limit)
//	TestService/StreamingInputCall        + every received message: sliding window 20/60s per peer (PerMessage)
//
// A limited call fails with ResourceExhausted and a google.rpc.RetryInfo
// detail (its delay is the Retry-After); a call a per-method limit denies
// charges the global limit nothing. The flags are the HTTP examples'
// (-redis, -trusted-proxies: x-forwarded-for metadata from a trusted peer,
// -disclosure, -headers, -shadow, -otel); there is no GET /metrics.
//
// Run: go run ./grpc -addr 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	grpclimit "github.com/quotagate/quotagate/adapters/grpc"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/examples/internal/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

func main() {
	c := app.ParseFlags()
	srv, describe, env, err := build(c)
	if err != nil {
		fatal(err)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		fatal(err)
	}
	// SIGINT and SIGTERM are caught from before the start-up line on, so
	// that a signal sent as soon as the line is read stops the server
	// gracefully (and -otel exports) rather than killing it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if env.RedisStatus != "" {
		fmt.Printf("quotagate example (grpc): %s\n", env.RedisStatus)
	}
	fmt.Printf("quotagate example (grpc) listening on grpc://%s store=%s; %s\n", ln.Addr(), env.StoreName, describe)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if err != nil {
			fatal(err)
		}
	case <-ctx.Done():
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			srv.Stop()
		}
	}
	if env.Flush != nil { // -otel: export the last measurements
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		env.Flush(fctx)
	}
}

// build returns the server with its interceptors, and the policy part of
// the start-up line.
func build(c app.Config) (*grpc.Server, string, *app.Env, error) {
	// A service of its own beside the HTTP examples: its own key prefix, so
	// that on one Redis their allowances stay apart.
	env, err := app.NewEnv(c, "grpc-example")
	if err != nil {
		return nil, "", nil, err
	}
	global, err := limit.New(env.Store, env.Fill(limit.Policy{
		Limit: 100, Window: time.Minute, Algorithm: limit.SlidingWindow,
		SkipPaths: []string{healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName, healthpb.Health_List_FullMethodName},
	}), env.Options...)
	if err != nil {
		return nil, "", nil, fmt.Errorf("global policy: %w", err)
	}
	policies := []struct {
		name   string
		p      limit.Policy
		method string
		opts   []grpclimit.Option
	}{
		{"login", limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute},
			testpb.TestService_UnaryCall_FullMethodName, nil},
		{"search", limit.Policy{Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5,
			CostFunc: grpclimit.CostFunc(func(c *grpclimit.Call) int64 {
				if r, ok := c.Message.(*testpb.SimpleRequest); ok && r.GetResponseSize() > 0 {
					return 3
				}
				return 1
			})}, testpb.TestService_CacheableUnaryCall_FullMethodName, nil},
		{"export", limit.Policy{Name: "export", Limit: 5, Window: time.Minute,
			KeyFunc: grpclimit.KeyFunc(func(c *grpclimit.Call) (string, error) { return c.Metadata("x-api-key"), nil }),
			Plan:    app.PlanOf, DefaultPlan: "free", Plans: map[string][]limit.Rate{"pro": {{Limit: 20, Window: time.Minute}}}},
			testpb.TestService_StreamingOutputCall_FullMethodName, nil},
		{"upload", limit.Policy{Name: "upload-messages", Limit: 20, Window: time.Minute},
			testpb.TestService_StreamingInputCall_FullMethodName, []grpclimit.Option{grpclimit.PerMessage()}},
	}
	all, err := grpclimit.New(global)
	if err != nil {
		return nil, "", nil, err
	}
	unary, stream := []grpc.UnaryServerInterceptor{all.Unary}, []grpc.StreamServerInterceptor{all.Stream}
	for _, pc := range policies {
		l, err := global.With(env.Fill(pc.p))
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s policy: %w", pc.name, err)
		}
		in, err := grpclimit.New(l, append(pc.opts, grpclimit.Methods(pc.method))...)
		if err != nil {
			return nil, "", nil, err
		}
		unary, stream = append(unary, in.Unary), append(stream, in.Stream)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	testpb.RegisterTestServiceServer(srv, testService{})
	describe := "policies: global sliding-window 100/60s per peer on every call but grpc.health.v1.Health; " +
		"UnaryCall fixed-window 5/60s per method; CacheableUnaryCall token-bucket 1/s burst 5 (response_size > 0 costs 3); " +
		"StreamingOutputCall per x-api-key metadata, pro- keys 20/60s, others 5/60s, per stream; " +
		"StreamingInputCall 20 received messages/60s; a call a per-method limit denies charges the global limit nothing"
	if c.Shadow {
		describe += "; SHADOW MODE: nothing is limited"
	}
	return srv, describe, env, nil
}

// testService answers grpc's interop TestService: unary calls with an
// empty response, StreamingOutputCall with one response per
// response_parameters entry, StreamingInputCall with the payload bytes it
// read.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func (testService) CacheableUnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func (testService) StreamingOutputCall(r *testpb.StreamingOutputCallRequest, s testpb.TestService_StreamingOutputCallServer) error {
	for range r.GetResponseParameters() {
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

func (testService) StreamingInputCall(s testpb.TestService_StreamingInputCallServer) error {
	var size int32
	for n := 0; ; n++ {
		m, err := s.Recv()
		if err != nil {
			s.SetTrailer(metadata.Pairs("x-received-messages", strconv.Itoa(n)))
		}
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: size})
		}
		if err != nil {
			return err // a limited message: the stream ends with its ResourceExhausted
		}
		size += int32(len(m.GetPayload().GetBody()))
	}
}

func fatal(err error) {
	io.WriteString(os.Stderr, "error: "+err.Error()+"\n")
	os.Exit(2)
}
