package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	grpclimit "github.com/quotagate/quotagate/adapters/grpc"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// A global limit on every call, plus a stricter one on one method, chained
// after it: grpc's health service, called over loopback.
func Example() {
	// An application passes memstore.New() or a Redis store; the engine's
	// reference store keeps this module's tests free of other quotagate
	// modules.
	store := limittest.NewStore(limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Now)
	global := limittest.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	check, err := global.With(limit.Policy{Name: "health-check", Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true})
	if err != nil {
		panic(err)
	}
	all, err := grpclimit.New(global)
	if err != nil {
		panic(err)
	}
	strict, err := grpclimit.New(check, grpclimit.Methods(healthpb.Health_Check_FullMethodName))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(all.Unary, strict.Unary), grpc.ChainStreamInterceptor(all.Stream, strict.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err), retryDelay(err))
	}
	// Output:
	// OK -1ns
	// OK -1ns
	// ResourceExhausted 1m0s
}
