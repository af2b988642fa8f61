package bench

import (
	"context"
	"net"
	"testing"
	"time"

	grpclimit "github.com/quotagate/quotagate/adapters/grpc"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
)

type emptyService struct {
	testpb.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

// noop is the interceptor the limiter is measured against: it only calls
// the handler.
func noop(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}

// BenchmarkGRPCUnary measures one allowed unary call (EmptyCall) over
// loopback TCP, client and server in this process, behind a no-op unary
// interceptor ("noop"; "noop-control" is a second such server, whose
// difference from noop is the measurement's noise) and behind grpclimit's
// (memory store, Shared and PerRoute): the limiter's cost is the
// difference. The "-workers" servers run with grpc.NumStreamWorkers(2):
// their handler goroutines are long-lived, while by default every call
// runs on a fresh goroutine, whose stack grows (copied) when the call goes
// deeper than grpc's own path, as the limiter's decision does. Loopback
// latency drifts with the machine's load, so the contenders run in rotated
// order, three rounds (the repeats are named "#01", "#02"): compare
// medians; and paired, which alternates a no-op call and a limited call
// of the same server configuration in every iteration.
func BenchmarkGRPCUnary(b *testing.B) {
	type contender struct {
		name   string
		client testpb.TestServiceClient
	}
	var cs []contender
	for _, c := range []struct {
		name    string
		scope   limit.Scope
		in      bool
		workers bool
	}{
		{"noop", limit.Shared, false, false}, {"noop-control", limit.Shared, false, false},
		{"quotagate-shared", limit.Shared, true, false}, {"quotagate-per-method", limit.PerRoute, true, false},
		{"noop-workers", limit.Shared, false, true}, {"quotagate-shared-workers", limit.Shared, true, true},
	} {
		var icpt grpc.UnaryServerInterceptor = noop
		if c.in {
			s, err := memstore.New()
			if err != nil {
				b.Fatal(err)
			}
			in, err := grpclimit.New(limittest.MustNew(s, limit.Policy{Limit: quota, Window: window, Scope: c.scope}))
			if err != nil {
				b.Fatal(err)
			}
			icpt = in.Unary
		}
		opts := []grpc.ServerOption{grpc.UnaryInterceptor(icpt)}
		if c.workers {
			opts = append(opts, grpc.NumStreamWorkers(2))
		}
		srv := grpc.NewServer(opts...)
		testpb.RegisterTestServiceServer(srv, emptyService{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(ln)
		defer srv.Stop()
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		cs = append(cs, contender{c.name, testpb.NewTestServiceClient(cc)})
	}
	ctx, req := context.Background(), &testpb.Empty{}
	// paired alternates a no-op call and a limited call in every iteration
	// (their order alternating too) and reports each one's mean and the
	// overhead: the machine's load drifts alike under both, so this is the
	// comparison that holds on a busy machine.
	for _, p := range [][2]int{{0, 1}, {0, 2}, {0, 3}, {4, 5}} {
		base, limited := cs[p[0]], cs[p[1]]
		b.Run("paired-"+base.name+"-vs-"+limited.name, func(b *testing.B) {
			var tNoop, tLimited time.Duration
			pair := [2]testpb.TestServiceClient{base.client, limited.client}
			n := 0
			for b.Loop() {
				for k := range 2 {
					i := (k + n) % 2
					t0 := time.Now()
					if _, err := pair[i].EmptyCall(ctx, req); err != nil {
						b.Fatal(err)
					}
					if i == 0 {
						tNoop += time.Since(t0)
					} else {
						tLimited += time.Since(t0)
					}
				}
				n++
			}
			b.ReportMetric(float64(tNoop.Nanoseconds())/float64(n), "noop-ns/call")
			b.ReportMetric(float64(tLimited.Nanoseconds())/float64(n), "limited-ns/call")
			b.ReportMetric(100*(float64(tLimited)/float64(tNoop)-1), "overhead-%")
		})
	}
	for round := range 3 {
		for i := range cs {
			c := cs[(i+round)%len(cs)]
			b.Run(c.name, func(b *testing.B) {
				if _, err := c.client.EmptyCall(ctx, req); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.client.EmptyCall(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkGRPCInterceptorOnly calls the unary interceptor straight, with
// the context grpc hands it (a peer in it), and no network: nothing but the
// limiter is measured, beside the no-op interceptor.
func BenchmarkGRPCInterceptorOnly(b *testing.B) {
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	in, err := grpclimit.New(limittest.MustNew(s, limit.Policy{Limit: quota, Window: window}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}})
	info := &grpc.UnaryServerInfo{FullMethod: testpb.TestService_EmptyCall_FullMethodName}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, c := range []struct {
		name string
		icpt grpc.UnaryServerInterceptor
	}{{"noop", noop}, {"quotagate", in.Unary}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.icpt(ctx, nil, info, handler)
			}
		})
	}
}
