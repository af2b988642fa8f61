package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	grpclimit "github.com/quotagate/quotagate/adapters/grpc"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newStore returns a reference store at a fake clock.
func newStore() *limittest.Store { return limittest.NewStore(limittest.NewClock(epoch).Now) }

// service is grpc's interop TestService: UnaryCall and EmptyCall answer
// (UnaryCall with the code its request's response_status asks for),
// StreamingInputCall reads every message.
type service struct {
	testpb.UnimplementedTestServiceServer
	calls, messages atomic.Int64
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.calls.Add(1)
	return &testpb.Empty{}, nil
}

func (s *service) UnaryCall(_ context.Context, r *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.calls.Add(1)
	if st := r.GetResponseStatus(); st.GetCode() != 0 {
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *service) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	s.calls.Add(1)
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&testpb.StreamingInputCallResponse{})
			}
			return err
		}
		s.messages.Add(1)
	}
}

// serve serves svc behind the interceptors on a loopback TCP listener and
// returns its address.
func serve(t *testing.T, svc *service, ins ...*grpclimit.Interceptor) string {
	t.Helper()
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	for _, in := range ins {
		unary, stream = append(unary, in.Unary), append(stream, in.Stream)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	testpb.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// client dials addr from the loopback address from (127.0.0.x), so that
// each simulated client has its own socket peer.
func client(t *testing.T, addr, from string) testpb.TestServiceClient {
	t.Helper()
	local := &net.TCPAddr{IP: net.ParseIP(from)}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: local}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func mustNew(t *testing.T, l *limit.Limiter, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	in, err := grpclimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func ctx(t *testing.T, kv ...string) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if len(kv) > 0 {
		c = metadata.AppendToOutgoingContext(c, kv...)
	}
	return c
}

// retryDelay returns the RetryInfo delay of err's status, or -1 without one.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func TestLimitedUnaryCallIsResourceExhaustedWithRetryInfo(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true})
	c := client(t, serve(t, svc, mustNew(t, l)), "127.0.0.1")
	for i := range 2 {
		if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	var md metadata.MD
	_, err := c.EmptyCall(ctx(t), &testpb.Empty{}, grpc.Header(&md))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	if got := retryDelay(err); got != time.Minute {
		t.Errorf("RetryInfo delay %v, want 1m0s (the window's end, as Retry-After)", got)
	}
	if got := md.Get("retry-after"); len(got) != 1 || got[0] != "60" {
		t.Errorf("retry-after metadata %q, want [60]", got)
	}
	if got := md.Get("content-type"); len(got) == 1 && got[0] != "application/grpc" {
		t.Errorf("content-type %q: the problem body's media type leaked into gRPC metadata", got)
	}
	if msg := status.Convert(err).Message(); msg != "Too Many Requests" {
		t.Errorf("message %q, want the problem title", msg)
	}
	if n := svc.calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

func TestEachPeerHasItsOwnAllowance(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute})
	addr := serve(t, svc, mustNew(t, l))
	a, b := client(t, addr, "127.0.0.2"), client(t, addr, "127.0.0.3")
	if _, err := a.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.EmptyCall(ctx(t), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a's second call: %v, want ResourceExhausted", err)
	}
	if _, err := b.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
		t.Fatalf("b's first call: %v", err)
	}
}

func TestFailClosedIsUnavailableWithRetryInfo(t *testing.T) {
	l := limittest.MustNew(limittest.FailingStore{}, limit.Policy{FailureMode: limit.FailClosed})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	_, err := c.EmptyCall(ctx(t), &testpb.Empty{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("%v, want Unavailable", err)
	}
	if got := retryDelay(err); got != time.Second {
		t.Errorf("RetryInfo delay %v, want 1s", got)
	}
}

func TestFailOpenAdmitsWhenTheStoreFails(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(limittest.FailingStore{}, limit.Policy{Limit: 1})
	c := client(t, serve(t, svc, mustNew(t, l)), "127.0.0.1")
	for range 3 {
		if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDiscloseNoneSendsTheBareCode(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Disclosure: limit.DiscloseNone})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	c.EmptyCall(ctx(t), &testpb.Empty{})
	var md metadata.MD
	_, err := c.EmptyCall(ctx(t), &testpb.Empty{}, grpc.Header(&md))
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) != -1 {
		t.Fatalf("%v with delay %v, want ResourceExhausted without RetryInfo", err, retryDelay(err))
	}
	if len(md.Get("retry-after")) != 0 {
		t.Errorf("retry-after %q disclosed at DiscloseNone", md.Get("retry-after"))
	}
}

func TestDiscloseAlwaysPutsTheRateLimitFieldsInTheHeader(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 5, Window: time.Minute, Disclosure: limit.DiscloseAlways})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	var md metadata.MD
	if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	if got := md.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"5p60";q=5;w=60` {
		t.Errorf("ratelimit-policy %q", got)
	}
	if got := md.Get("ratelimit"); len(got) != 1 || got[0][:len(`"5p60";r=4;t=`)] != `"5p60";r=4;t=` {
		t.Errorf("ratelimit %q", got)
	}
}

func TestStreamIsChargedWhenItOpens(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute})
	c := client(t, serve(t, svc, mustNew(t, l)), "127.0.0.1")
	send := func(n int) error {
		s, err := c.StreamingInputCall(ctx(t))
		if err != nil {
			return err
		}
		for range n {
			if err := s.Send(&testpb.StreamingInputCallRequest{}); err != nil {
				break // the server ended the stream: CloseAndRecv has its status
			}
		}
		_, err = s.CloseAndRecv()
		return err
	}
	if err := send(10); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	err := send(1)
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) <= 0 {
		t.Fatalf("second stream: %v, want ResourceExhausted with a retry delay", err)
	}
	if svc.calls.Load() != 1 || svc.messages.Load() != 10 {
		t.Errorf("handler ran %d times for %d messages, want 1 and 10", svc.calls.Load(), svc.messages.Load())
	}
}

func TestPerMessageChargesEveryReceivedMessage(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 3, Window: time.Minute, Algorithm: limit.FixedWindow})
	c := client(t, serve(t, svc, mustNew(t, l, grpclimit.PerMessage())), "127.0.0.1")
	s, err := c.StreamingInputCall(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := s.Send(&testpb.StreamingInputCallRequest{}); err != nil {
			break
		}
	}
	_, err = s.CloseAndRecv()
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) <= 0 {
		t.Fatalf("%v, want ResourceExhausted with a retry delay", err)
	}
	if got := s.Trailer().Get("retry-after"); len(got) != 1 {
		t.Errorf("trailer retry-after %q, want one value", got)
	}
	if n := svc.messages.Load(); n != 3 {
		t.Errorf("handler got %d messages, want 3", n)
	}
}

func TestPerMessageCostFuncPricesTheMessage(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 10, Window: time.Minute, Algorithm: limit.FixedWindow,
		CostFunc: grpclimit.CostFunc(func(c *grpclimit.Call) int64 {
			m, _ := c.Message.(*testpb.StreamingInputCallRequest)
			return int64(len(m.GetPayload().GetBody()))
		})})
	c := client(t, serve(t, svc, mustNew(t, l, grpclimit.PerMessage())), "127.0.0.1")
	s, err := c.StreamingInputCall(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // 4 + 4 admitted, the third (12 > 10) limited
		if err := s.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte("four")}}); err != nil {
			break
		}
	}
	if _, err := s.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted", err)
	}
	if n := svc.messages.Load(); n != 2 {
		t.Errorf("handler got %d messages, want 2", n)
	}
}

func TestMethodsDecideOnlyTheNamedMethods(t *testing.T) {
	svc := &service{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute})
	c := client(t, serve(t, svc, mustNew(t, l, grpclimit.Methods(testpb.TestService_UnaryCall_FullMethodName))), "127.0.0.1")
	for range 3 {
		if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall is not named: %v", err)
		}
	}
	c.UnaryCall(ctx(t), &testpb.SimpleRequest{})
	if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second UnaryCall: %v, want ResourceExhausted", err)
	}
}

func TestMethodsAcceptAWholeService(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute})
	c := client(t, serve(t, &service{}, mustNew(t, l, grpclimit.Methods("/grpc.testing.TestService/"))), "127.0.0.1")
	c.EmptyCall(ctx(t), &testpb.Empty{})
	if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted: one Shared bucket for the service", err)
	}
}

func TestPerRouteGivesEveryMethodItsBucket(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute, Scope: limit.PerRoute})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("UnaryCall's own bucket: %v", err)
	}
	if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted", err)
	}
}

func TestSkipPathsNameFullMethods(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, SkipPaths: []string{testpb.TestService_EmptyCall_FullMethodName}})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	for range 3 {
		if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMethodsRejectsWhatIsNotAMethodName(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{})
	for _, bad := range []string{"Login", "/Login", "auth.Auth/Login", "/a/b/c", "//Login", "/a b/C"} {
		if _, err := grpclimit.New(l, grpclimit.Methods(bad)); err == nil {
			t.Errorf("Methods(%q) accepted", bad)
		}
	}
	if _, err := grpclimit.New(l, grpclimit.Methods()); err == nil {
		t.Error("Methods() accepted")
	}
	if _, err := grpclimit.New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

func TestALimitedCallChargesNoInterceptor(t *testing.T) {
	svc := &service{}
	store := newStore()
	global := limittest.MustNew(store, limit.Policy{Limit: 3, Window: time.Minute})
	strict, _ := global.With(limit.Policy{Name: "unary", Limit: 1, Window: time.Minute})
	c := client(t, serve(t, svc, mustNew(t, global), mustNew(t, strict, grpclimit.Methods(testpb.TestService_UnaryCall_FullMethodName))), "127.0.0.1")
	if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%v, want ResourceExhausted", err)
		}
	}
	for i := range 2 { // the global allowance still has 2
		if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall %d: %v: the strict interceptor's denials were charged to the global one", i+1, err)
		}
	}
	if _, err := c.EmptyCall(ctx(t), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted", err)
	}
}

func TestCountStatusSeesTheCallsCode(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute,
		CountStatus: func(s int) bool { return s >= 400 }})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	for i := range 3 {
		if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("OK call %d: %v: an OK call was counted", i+1, err)
		}
	}
	fail := &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.InvalidArgument)}}
	if _, err := c.UnaryCall(ctx(t), fail); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("%v, want the handler's InvalidArgument", err)
	}
	if _, err := c.UnaryCall(ctx(t), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted: the InvalidArgument call counts", err)
	}
}

func TestTrustedProxyForwardsTheClientAddressInMetadata(t *testing.T) {
	proxy := netip.MustParsePrefix("127.0.0.10/32")
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute}, limit.WithTrustedProxies(proxy))
	addr := serve(t, &service{}, mustNew(t, l))
	viaProxy, direct := client(t, addr, "127.0.0.10"), client(t, addr, "127.0.0.11")
	for _, xff := range []string{"203.0.113.1", "203.0.113.2"} {
		if _, err := viaProxy.EmptyCall(ctx(t, "x-forwarded-for", xff), &testpb.Empty{}); err != nil {
			t.Fatalf("client %s behind the proxy: %v", xff, err)
		}
	}
	if _, err := viaProxy.EmptyCall(ctx(t, "x-forwarded-for", "203.0.113.1"), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted for 203.0.113.1's second call", err)
	}
	// A client that is not a trusted proxy cannot choose its bucket.
	for i, xff := range []string{"198.51.100.1", "198.51.100.2"} {
		_, err := direct.EmptyCall(ctx(t, "x-forwarded-for", xff), &testpb.Empty{})
		if want := []codes.Code{codes.OK, codes.ResourceExhausted}[i]; status.Code(err) != want {
			t.Fatalf("direct call %d claiming %s: %v, want %v", i+1, xff, err, want)
		}
	}
}

func TestKeyFuncReadsTheMetadata(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute,
		KeyFunc: grpclimit.KeyFunc(func(c *grpclimit.Call) (string, error) { return c.Metadata("x-api-key"), nil })})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	for _, key := range []string{"a", "b"} {
		if _, err := c.EmptyCall(ctx(t, "x-api-key", key), &testpb.Empty{}); err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
	}
	if _, err := c.EmptyCall(ctx(t, "x-api-key", "a"), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted", err)
	}
}

// A plan chosen from the metadata decides the call: the pro key gets its
// plan's 3, the others the default 1.
func TestPlanFuncReadsTheMetadata(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute,
		KeyFunc: grpclimit.KeyFunc(func(c *grpclimit.Call) (string, error) { return c.Metadata("x-api-key"), nil }),
		Plan: grpclimit.PlanFunc(func(c *grpclimit.Call) (string, error) {
			if c.Metadata("x-api-key") == "pro-key" {
				return "pro", nil
			}
			return "", nil
		}),
		Plans: map[string][]limit.Rate{"pro": {{Limit: 3, Window: time.Minute}}}})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	for key, allowed := range map[string]int{"pro-key": 3, "free-key": 1} {
		for i := range allowed + 1 {
			_, err := c.EmptyCall(ctx(t, "x-api-key", key), &testpb.Empty{})
			if want := map[bool]codes.Code{true: codes.OK, false: codes.ResourceExhausted}[i < allowed]; status.Code(err) != want {
				t.Fatalf("%s, call %d: %v, want %v", key, i+1, err, want)
			}
		}
	}
}

func TestOverCapacityHasNoRetryInfo(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 2, CostFunc: grpclimit.CostFunc(func(*grpclimit.Call) int64 { return 3 })})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	_, err := c.EmptyCall(ctx(t), &testpb.Empty{})
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) != -1 {
		t.Fatalf("%v with delay %v, want ResourceExhausted and no RetryInfo: no wait admits it", err, retryDelay(err))
	}
}

func TestLimitedResponseStatusBecomesItsCode(t *testing.T) {
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
		return &limit.LimitedResponse{Status: 403, Body: []byte("go away")}
	}})
	c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
	c.EmptyCall(ctx(t), &testpb.Empty{})
	_, err := c.EmptyCall(ctx(t), &testpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "go away" {
		t.Fatalf("%v, want PermissionDenied \"go away\"", err)
	}
}

// A LimitedResponse body that is not UTF-8 (Latin-1 text here), or whose
// problem detail is 10 000 bytes, still gives a ResourceExhausted with its
// RetryInfo: the message is made valid UTF-8 (grpc drops the details of a
// status it cannot marshal) and at most 1 KiB (it travels in a header).
func TestDenialMessageIsShortValidUTF8(t *testing.T) {
	for _, tc := range []struct{ ctype, body string }{
		{"text/plain", "Zu viele Anfragen \xe2 bitte sp\xe4ter"},
		{"text/plain", strings.Repeat("\xe4", 2000)},
		{"text/plain", strings.Repeat("x", 1023) + "\u00e4"},
		{"application/problem+json", `{"title":"Too Many Requests","detail":"` + strings.Repeat("d", 10000) + `"}`},
	} {
		body := tc.body
		l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute, LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
			return &limit.LimitedResponse{Status: 429, Header: http.Header{"Content-Type": {tc.ctype}}, Body: []byte(body)}
		}})
		c := client(t, serve(t, &service{}, mustNew(t, l)), "127.0.0.1")
		c.EmptyCall(ctx(t), &testpb.Empty{})
		_, err := c.EmptyCall(ctx(t), &testpb.Empty{})
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || retryDelay(err) <= 0 {
			t.Errorf("body %.20q: %v with RetryInfo delay %v, want ResourceExhausted with a delay", body, err, retryDelay(err))
		}
		if m := st.Message(); !utf8.ValidString(m) || len(m) > 1024 || m == "" {
			t.Errorf("body %.20q: message %.40q (%d bytes), want valid UTF-8 of 1-1024 bytes", body, m, len(m))
		}
	}
}

func TestUnixSocketPeerUsesTheFallbackBucket(t *testing.T) {
	rec := &limittest.Recorder{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 100}, limit.WithObserver(rec))
	in := mustNew(t, l)
	p := &peer.Peer{Addr: &net.UnixAddr{Name: "@", Net: "unix"}}
	c := peer.NewContext(context.Background(), p)
	if _, err := in.Unary(c, nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, okHandler); err != nil {
		t.Fatal(err)
	}
	if got := rec.Last().KeySource; got != limit.KeySourceFallback {
		t.Errorf("key source %q, want fallback", got)
	}
}

func okHandler(context.Context, any) (any, error) { return nil, nil }

// TestAllowedUnaryCallAllocatesNothing checks the interceptor's own cost on
// an allowed call at the default disclosure: the call's ctx is what grpc
// hands the interceptor (a peer in it).
func TestAllowedUnaryCallAllocatesNothing(t *testing.T) {
	limittest.SkipAllocsUnderRace(t)
	for _, c := range []struct {
		name string
		p    limit.Policy
	}{{"shared", limit.Policy{Limit: 1 << 40 / 60_000}}, {"per-route", limit.Policy{Limit: 1 << 40 / 60_000, Scope: limit.PerRoute}}} {
		t.Run(c.name, func(t *testing.T) {
			in := mustNew(t, limittest.MustNew(newStore(), c.p))
			cx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}})
			info := &grpc.UnaryServerInfo{FullMethod: testpb.TestService_EmptyCall_FullMethodName}
			in.Unary(cx, nil, info, okHandler)
			if n := testing.AllocsPerRun(500, func() { in.Unary(cx, nil, info, okHandler) }); n != 0 {
				t.Errorf("%v allocations per allowed call, want 0", n)
			}
		})
	}
}

// TestAllowedUnaryCallKeepsItsStack: grpc runs every call on a fresh
// goroutine, whose stack grpc's own path has grown by the time the
// interceptors run; an allowed call's decision fits in it, so the stack is
// not copied (a stack copy costs more than the decision). An outer
// interceptor sees a local variable's address move when the stack under it
// was copied; a no-op interceptor's calls are the control.
func TestAllowedUnaryCallKeepsItsStack(t *testing.T) {
	if limittest.RaceEnabled {
		t.Skip("SKIPPED under -race: its instrumentation enlarges frames and the stack guard; run without -race")
	}
	var moved atomic.Int64
	outer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		var x int
		at := uintptr(unsafe.Pointer(&x))
		resp, err := h(ctx, req)
		if at != uintptr(unsafe.Pointer(&x)) {
			moved.Add(1)
		}
		return resp, err
	}
	noop := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	in := mustNew(t, limittest.MustNew(newStore(), limit.Policy{Limit: 1 << 40 / 60_000}))
	for _, c := range []struct {
		name string
		icpt grpc.UnaryServerInterceptor
	}{{"noop", noop}, {"quotagate", in.Unary}} {
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(outer, c.icpt))
		testpb.RegisterTestServiceServer(srv, &service{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		cl := client(t, ln.Addr().String(), "127.0.0.1")
		moved.Store(0)
		const calls = 50
		for range calls {
			if _, err := cl.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
				t.Fatal(err)
			}
		}
		srv.Stop()
		if n := moved.Load(); n > 0 {
			t.Errorf("%s: the stack was copied under %d of %d allowed calls", c.name, n, calls)
		}
	}
}

// TestPeerAddressesNeverMixUp: more connections than the peer cache has
// slots, each its own address, two rounds: every peer keeps its own
// allowance, whichever connection last held its slot.
func TestPeerAddressesNeverMixUp(t *testing.T) {
	in := mustNew(t, limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute}))
	info := &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}
	ctxs := make([]context.Context, 3000)
	for i := range ctxs {
		a := &net.TCPAddr{IP: net.IPv4(10, 0, byte(i>>8), byte(i)), Port: 1000 + i}
		ctxs[i] = peer.NewContext(context.Background(), &peer.Peer{Addr: a})
	}
	for round, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		for i, c := range ctxs {
			if _, err := in.Unary(c, nil, info, okHandler); status.Code(err) != want {
				t.Fatalf("round %d, peer %d: %v, want %v", round+1, i, err, want)
			}
		}
	}
}

// TestUnknownMethodsShareTheSharedBucket: behind grpc.UnknownServiceHandler
// every invented method name counts in one bucket, with no handler label.
func TestUnknownMethodsShareTheSharedBucket(t *testing.T) {
	rec := &limittest.Recorder{}
	l := limittest.MustNew(newStore(), limit.Policy{Limit: 1, Window: time.Minute, Scope: limit.PerRoute}, limit.WithObserver(rec))
	in := mustNew(t, l)
	srv := grpc.NewServer(grpc.StreamInterceptor(in.Stream), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error { return nil }))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	if err := cc.Invoke(ctx(t), "/invented.Svc/A", &testpb.Empty{}, &testpb.Empty{}); status.Code(err) == codes.ResourceExhausted {
		t.Fatalf("first invented method: %v", err)
	}
	if got := rec.Last().Handler; got != "" {
		t.Errorf("handler label %q, want none", got)
	}
	if err := cc.Invoke(ctx(t), "/invented.Svc/B", &testpb.Empty{}, &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("another invented method: %v, want ResourceExhausted from the same Shared bucket", err)
	}
}
