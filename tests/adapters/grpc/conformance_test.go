package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	grpclimit "github.com/quotagate/quotagate/adapters/grpc"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	"github.com/quotagate/quotagate/tests/redistest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The gRPC conformance scenarios: the HTTP suite's behaviours that apply to
// gRPC calls (per-peer limits, per-method buckets, trusted forwarding
// metadata, failure modes, stacked interceptors, cost, several quotas,
// plans, shadow mode, counting by status, streams), as data, through
// grpclimit's interceptors on a real gRPC server over loopback TCP (and a
// Unix socket for the peer without an address), against every store of
// the matrix.

// Method names of the scenarios' steps.
const (
	empty  = "EmptyCall"          // unary, global mounts only in most scenarios
	unary  = "UnaryCall"          // unary, answers Step.Answer
	upload = "StreamingInputCall" // client stream of Step.Messages messages
)

func full(m string) string { return "/grpc.testing.TestService/" + m }

// scenario is one named behaviour.
type scenario struct {
	name     string
	policies map[string]limit.Policy
	options  []limit.Option
	// failure puts the store behind a FlakyStore that steps switch, under
	// a guard (timeout, breaker; no deny cache).
	failure bool
	// chain is the interceptors, in order.
	chain []mount
	steps []step
	// concurrent, when set, runs after the steps.
	concurrent *concurrent
}

// mount is one interceptor: a policy, optionally restricted to methods,
// optionally PerMessage.
type mount struct {
	policy     string
	methods    []string
	perMessage bool
}

// step is one call, or Times identical ones.
type step struct {
	client   string // loopback address, or "unix"
	method   string
	md       []string // metadata key, value pairs
	advance  time.Duration
	store    string // "fail", "ok": switches the flaky store first
	times    int
	messages int        // upload: messages sent
	answer   codes.Code // unary: the code the handler answers
	want     want
}

// want is the expected outcome of each call of a step.
type want struct {
	code codes.Code
	// delay is the RetryInfo delay; -1: none; 0: unchecked.
	delay time.Duration
	// md are header (or, for streams, header and trailer) metadata values
	// that must match exactly; "-" means absent.
	md map[string]string
	// ran is how many times the handler runs per call (-1: once for OK,
	// else never).
	ran int
	// received is how many messages the upload handler got (unchecked
	// when 0).
	received int64
}

// concurrent sends clients calls at once from one client and expects
// exactly allowed of them admitted.
type concurrent struct {
	client           string
	clients, allowed int
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fixed(n int64, w time.Duration) limit.Policy {
	return limit.Policy{Algorithm: limit.FixedWindow, Limit: n, Window: w, AlignWindows: true}
}

func call(client, method string, code codes.Code) step {
	return step{client: client, method: method, want: want{code: code, ran: -1}}
}

func times(s step, n int) step { s.times = n; return s }

func after(d time.Duration, s step) step { s.advance = d; return s }

func withMD(s step, kv ...string) step { s.md = kv; return s }

func delayed(s step, d time.Duration) step { s.want.delay = d; return s }

// metadataKey is a typed key function over *grpclimit.Call: the first
// value of the metadata key name.
func metadataKey(name string) func(limit.Request) (string, error) {
	return grpclimit.KeyFunc(func(c *grpclimit.Call) (string, error) { return c.Metadata(name), nil })
}

// costFromMetadata prices a call by its x-cost metadata (default: the
// policy's Cost).
var costFromMetadata = grpclimit.CostFunc(func(c *grpclimit.Call) int64 {
	n, _ := strconv.ParseInt(c.Metadata("x-cost"), 10, 64)
	return n
})

func scenarios() []scenario {
	const a, b, c = "127.0.0.2", "127.0.0.3", "127.0.0.4"
	const proxy = "127.0.0.10"
	return []scenario{
		{
			name:     "01-per-peer-limit",
			policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			chain:    []mount{{policy: "g"}},
			steps: []step{
				times(call(a, empty, codes.OK), 2),
				delayed(call(a, empty, codes.ResourceExhausted), time.Minute),
				times(call(b, empty, codes.OK), 2),
				after(time.Minute, call(a, empty, codes.OK)),
			},
		},
		{
			name:     "02-per-method-buckets",
			policies: map[string]limit.Policy{"m": {Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true}},
			chain:    []mount{{policy: "m"}},
			steps: []step{
				call(a, empty, codes.OK),
				call(a, unary, codes.OK),
				delayed(call(a, unary, codes.ResourceExhausted), time.Minute),
				call(a, empty, codes.ResourceExhausted),
			},
		},
		{
			name:     "03-method-set-and-skip-paths",
			policies: map[string]limit.Policy{"m": {Name: "unary-only", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true}, "g": {Limit: 1, Window: time.Minute, SkipPaths: []string{full(empty)}}},
			chain:    []mount{{policy: "g"}, {policy: "m", methods: []string{full(unary)}}},
			steps: []step{
				times(call(a, empty, codes.OK), 3), // skipped by g, not named by m
				call(a, unary, codes.OK),
				call(a, unary, codes.ResourceExhausted),
			},
		},
		{
			name:     "04-trusted-proxy-metadata",
			policies: map[string]limit.Policy{"g": fixed(1, time.Minute)},
			options:  []limit.Option{limit.WithTrustedProxies(netip.MustParsePrefix(proxy + "/32"))},
			chain:    []mount{{policy: "g"}},
			steps: []step{
				withMD(call(proxy, empty, codes.OK), "x-forwarded-for", "203.0.113.1"),
				withMD(call(proxy, empty, codes.OK), "x-forwarded-for", "203.0.113.2"),
				withMD(call(proxy, empty, codes.ResourceExhausted), "x-forwarded-for", "198.51.100.7, 203.0.113.1"),
				// A malformed member is never a key: the nearest trusted hop is.
				withMD(call(proxy, empty, codes.OK), "x-forwarded-for", "not-an-address"),
				withMD(call(proxy, empty, codes.ResourceExhausted), "x-forwarded-for", "still-not"),
			},
		},
		{
			name:     "05-untrusted-peer-cannot-spoof-metadata",
			policies: map[string]limit.Policy{"g": fixed(1, time.Minute)},
			options:  []limit.Option{limit.WithTrustedProxies(netip.MustParsePrefix(proxy + "/32"))},
			chain:    []mount{{policy: "g"}},
			steps: []step{
				withMD(call(a, empty, codes.OK), "x-forwarded-for", "203.0.113.1"),
				withMD(call(a, empty, codes.ResourceExhausted), "x-forwarded-for", "203.0.113.2"),
				withMD(call(a, empty, codes.ResourceExhausted), "forwarded", "for=203.0.113.3", "x-real-ip", "203.0.113.4"),
			},
		},
		{
			name:     "06-no-trust-reads-no-metadata",
			policies: map[string]limit.Policy{"g": fixed(1, time.Minute)},
			chain:    []mount{{policy: "g"}},
			steps: []step{
				withMD(call(a, empty, codes.OK), "x-forwarded-for", "203.0.113.1"),
				withMD(call(a, empty, codes.ResourceExhausted), "x-forwarded-for", "203.0.113.2"),
			},
		},
		{
			name: "07-failure-modes",
			policies: map[string]limit.Policy{
				"open":   {Name: "open", Limit: 1, Window: time.Minute},
				"closed": {Name: "closed", Limit: 1, Window: time.Minute, FailureMode: limit.FailClosed},
			},
			failure: true,
			chain:   []mount{{policy: "open", methods: []string{full(empty)}}, {policy: "closed", methods: []string{full(unary)}}},
			steps: []step{
				call(a, empty, codes.OK),
				call(a, empty, codes.ResourceExhausted),
				{client: a, method: empty, store: "fail", times: 2, want: want{code: codes.OK, ran: 1}},
				{client: a, method: unary, want: want{code: codes.Unavailable, delay: time.Second, ran: 0}},
				{client: a, method: empty, store: "ok", want: want{code: codes.ResourceExhausted, ran: 0}},
				call(a, unary, codes.OK),
			},
		},
		{
			name: "08-fail-local-limits-per-process",
			policies: map[string]limit.Policy{
				"local": {Name: "local", Limit: 2, Window: time.Minute, Algorithm: limit.FixedWindow, AlignWindows: true, FailureMode: limit.FailLocal},
			},
			failure: true,
			chain:   []mount{{policy: "local"}},
			steps: []step{
				{client: a, method: empty, store: "fail", times: 2, want: want{code: codes.OK, ran: 1}},
				delayed(call(a, empty, codes.ResourceExhausted), time.Minute),
			},
		},
		{
			name: "09-stacked-interceptors-charge-nothing-on-a-denial",
			policies: map[string]limit.Policy{
				"g":      {Name: "global", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, AlignWindows: true},
				"strict": {Name: "strict", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true},
			},
			chain: []mount{{policy: "g"}, {policy: "strict", methods: []string{full(unary)}}},
			steps: []step{
				call(a, unary, codes.OK),
				{client: a, method: unary, times: 4, want: want{code: codes.ResourceExhausted, delay: time.Minute, ran: 0}},
				times(call(a, empty, codes.OK), 2),
				call(a, empty, codes.ResourceExhausted),
			},
		},
		{
			name: "10-cost-and-a-cost-no-wait-admits",
			policies: map[string]limit.Policy{
				"g": {Name: "priced", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, AlignWindows: true, CostFunc: costFromMetadata},
			},
			chain: []mount{{policy: "g"}},
			steps: []step{
				withMD(call(a, empty, codes.OK), "x-cost", "3"),
				delayed(withMD(call(a, empty, codes.ResourceExhausted), "x-cost", "3"), time.Minute),
				withMD(call(a, empty, codes.OK), "x-cost", "2"),
				delayed(withMD(call(b, empty, codes.ResourceExhausted), "x-cost", "6"), -1),
				times(call(b, empty, codes.OK), 5),
			},
		},
		{
			name: "11-several-quotas-all-or-nothing",
			policies: map[string]limit.Policy{
				"r": {Name: "reports", Algorithm: limit.FixedWindow, AlignWindows: true, Quotas: []limit.Rate{{Limit: 2, Window: 10 * time.Second}, {Limit: 3, Window: time.Minute}}},
			},
			chain: []mount{{policy: "r"}},
			steps: []step{
				times(call(a, empty, codes.OK), 2),
				delayed(call(a, empty, codes.ResourceExhausted), 10*time.Second),
				after(10*time.Second, call(a, empty, codes.OK)),
				delayed(call(a, empty, codes.ResourceExhausted), 50*time.Second),
			},
		},
		{
			name: "12-plans-by-metadata-key",
			policies: map[string]limit.Policy{
				"e": {Name: "export", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 1, Window: time.Minute,
					KeyFunc: metadataKey("x-api-key"),
					Plan: func(r limit.Request) (string, error) {
						if k, _ := metadataKey("x-api-key")(r); strings.HasPrefix(k, "pro-") {
							return "pro", nil
						}
						return "", nil
					},
					Plans: map[string][]limit.Rate{"pro": {{Limit: 3, Window: time.Minute}}}},
			},
			chain: []mount{{policy: "e"}},
			steps: []step{
				times(withMD(call(a, empty, codes.OK), "x-api-key", "pro-1"), 3),
				withMD(call(b, empty, codes.ResourceExhausted), "x-api-key", "pro-1"), // one key, whatever the peer
				withMD(call(a, empty, codes.OK), "x-api-key", "free-1"),
				withMD(call(a, empty, codes.ResourceExhausted), "x-api-key", "free-1"),
				call(c, empty, codes.OK), // no key: the peer
			},
		},
		{
			name: "13-shadow-next-to-an-enforcing-interceptor",
			policies: map[string]limit.Policy{
				"s":    {Name: "try", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 1, Window: time.Minute, Shadow: true},
				"real": {Name: "real", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 3, Window: time.Minute},
			},
			chain: []mount{{policy: "s"}, {policy: "real"}},
			steps: []step{
				{client: a, method: empty, times: 3, want: want{code: codes.OK, ran: 1}},
				call(a, empty, codes.ResourceExhausted),
			},
		},
		{
			name: "14-count-status-by-grpc-code",
			policies: map[string]limit.Policy{
				"s": {Name: "signin", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 2, Window: time.Minute,
					CountStatus: func(s int) bool { return s >= 400 }},
			},
			chain: []mount{{policy: "s"}},
			steps: []step{
				times(call(a, unary, codes.OK), 3),
				{client: a, method: unary, answer: codes.Unauthenticated, times: 2, want: want{code: codes.Unauthenticated, ran: 1}},
				{client: a, method: unary, want: want{code: codes.ResourceExhausted, ran: 0}},
			},
		},
		{
			name:     "15-stream-charged-when-it-opens",
			policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			chain:    []mount{{policy: "g"}},
			steps: []step{
				{client: a, method: upload, messages: 10, times: 2, want: want{code: codes.OK, ran: 1, received: 10}},
				{client: a, method: upload, messages: 1, want: want{code: codes.ResourceExhausted, delay: time.Minute, ran: 0}},
			},
		},
		{
			name: "16-per-message-limit",
			policies: map[string]limit.Policy{
				"open": {Name: "streams", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 10, Window: time.Minute},
				"msg":  {Name: "messages", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 5, Window: time.Minute},
			},
			chain: []mount{{policy: "open"}, {policy: "msg", perMessage: true, methods: []string{full(upload)}}},
			steps: []step{
				{client: a, method: upload, messages: 3, want: want{code: codes.OK, ran: 1, received: 3}},
				{client: a, method: upload, messages: 4, want: want{code: codes.ResourceExhausted, delay: time.Minute, ran: 1, received: 2,
					md: map[string]string{"retry-after": "60"}}},
				// The denied message does not refund the stream's opening: 2 of 10 spent.
				{client: a, method: empty, times: 8, want: want{code: codes.OK, ran: 1}},
				call(a, empty, codes.ResourceExhausted),
			},
		},
		{
			name: "17-disclosure-always-as-header-metadata",
			policies: map[string]limit.Policy{
				"g": {Name: "g", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 2, Window: time.Minute, Disclosure: limit.DiscloseAlways},
			},
			chain: []mount{{policy: "g"}},
			steps: []step{
				{client: a, method: empty, want: want{code: codes.OK, ran: 1, md: map[string]string{
					"ratelimit-policy": `"g";q=2;w=60`, "ratelimit": `"g";r=1;t=60`, "retry-after": "-", "cache-control": "-"}}},
				call(a, empty, codes.OK),
				{client: a, method: empty, want: want{code: codes.ResourceExhausted, delay: time.Minute, ran: 0, md: map[string]string{
					"ratelimit-policy": `"g";q=2;w=60`, "ratelimit": `"g";r=0;t=60`, "retry-after": "60"}}},
			},
		},
		{
			name: "18-disclosure-none-bare-code",
			policies: map[string]limit.Policy{
				"g": {Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 1, Window: time.Minute, Disclosure: limit.DiscloseNone},
			},
			chain: []mount{{policy: "g"}},
			steps: []step{
				call(a, empty, codes.OK),
				{client: a, method: empty, want: want{code: codes.ResourceExhausted, delay: -1, ran: 0, md: map[string]string{"retry-after": "-", "ratelimit": "-"}}},
			},
		},
		{
			name:     "19-unix-socket-peer-draws-on-the-fallback-bucket",
			policies: map[string]limit.Policy{"g": fixed(10, time.Minute)},
			chain:    []mount{{policy: "g"}},
			steps: []step{
				call("unix", empty, codes.OK), // max(cost, 10/10) = 1
				call("unix", empty, codes.ResourceExhausted),
				times(call(a, empty, codes.OK), 10),
			},
		},
		{
			name:       "20-concurrency-exactness",
			policies:   map[string]limit.Policy{"g": fixed(7, time.Minute)},
			chain:      []mount{{policy: "g"}},
			concurrent: &concurrent{client: a, clients: 24, allowed: 7},
		},
		{
			// Policy.MaxWait (the HTTP suite's GET /v1/feed): a call the
			// bucket cannot take now waits for its reserved slot (real
			// time; the store's fake clock stays frozen, so the slots
			// stay where the store put them) and is served with the
			// fields of any admitted call; 15 at once from another
			// client: the first at once, 10 in the slots of the next
			// 2 s, 4 limited.
			name: "21-token-bucket-calls-wait-for-a-slot",
			policies: map[string]limit.Policy{
				"feed": {Name: "feed", Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: 2 * time.Second, Disclosure: limit.DiscloseAlways},
			},
			chain: []mount{{policy: "feed"}},
			steps: []step{
				times(step{client: a, method: empty, want: want{code: codes.OK, ran: 1, md: map[string]string{
					"ratelimit-policy": `"feed";q=5;w=1`, "ratelimit": `"feed";r=0;t=1`, "retry-after": "-"}}}, 3),
			},
			concurrent: &concurrent{client: b, clients: 15, allowed: 11},
		},
	}
}

func TestConformance(t *testing.T) {
	rows := []struct {
		name string
		new  func(testing.TB, func() time.Time) limitstore.Store
	}{{"memory", redistest.Memory}, {"redis", redistest.Standalone}, {"redis-cluster", redistest.Cluster}}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var passed, failed, skipped int
			for _, sc := range scenarios() {
				var wasSkipped bool
				ok := t.Run(sc.name, func(t *testing.T) {
					t.Cleanup(func() { wasSkipped = t.Skipped() })
					run(t, sc, row.new)
				})
				switch {
				case wasSkipped:
					skipped++
				case ok:
					passed++
				default:
					failed++
				}
			}
			writeMatrix(t, row.name, passed, failed, skipped)
		})
	}
}

// writeMatrix writes the row of the matrix `make test` prints
// ($QUOTAGATE_MATRIX_DIR, as conformance.RunAdapter does), adapter "grpc".
func writeMatrix(t *testing.T, store string, passed, failed, skipped int) {
	dir := os.Getenv("QUOTAGATE_MATRIX_DIR")
	if dir == "" {
		return
	}
	name := fmt.Sprintf("grpc-%s-%d.tsv", store, os.Getpid())
	line := fmt.Sprintf("grpc\t%s\t%d\t%d\t%d\n", store, passed, failed, skipped)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(line), 0o644); err != nil {
		t.Logf("cannot write the matrix row: %v", err)
	}
}

// service is grpc's interop TestService, counting handler runs and
// received messages.
type service struct {
	testpb.UnimplementedTestServiceServer
	ran      atomic.Int64
	received atomic.Int64 // of the last upload
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.ran.Add(1)
	return &testpb.Empty{}, nil
}

func (s *service) UnaryCall(_ context.Context, r *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.ran.Add(1)
	if c := r.GetResponseStatus().GetCode(); c != 0 {
		return nil, status.Error(codes.Code(c), "as asked")
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *service) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	s.ran.Add(1)
	s.received.Store(0)
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&testpb.StreamingInputCallResponse{})
			}
			return err
		}
		s.received.Add(1)
	}
}

func run(t *testing.T, sc scenario, newStore func(testing.TB, func() time.Time) limitstore.Store) {
	clock := limittest.NewClock(epoch)
	store := newStore(t, clock.Now)
	var flaky *limittest.FlakyStore
	if sc.failure {
		flaky = &limittest.FlakyStore{Store: store}
		g, err := guard.New(flaky, guard.WithTimeout(time.Second), guard.WithoutDenyCache())
		if err != nil {
			t.Fatal(err)
		}
		store = g
	}
	limiters := map[string]*limit.Limiter{}
	for name, p := range sc.policies {
		opts := append([]limit.Option{limit.WithKeyPrefix("conformance-grpc")}, sc.options...)
		if p.FailureMode == limit.FailLocal {
			opts = append(opts, limit.WithLocalStore(redistest.Memory(t, clock.Now)))
		}
		l, err := limit.New(store, p, opts...)
		if err != nil {
			t.Fatalf("policy %s: %v", name, err)
		}
		limiters[name] = l
	}
	var unaryChain []grpc.UnaryServerInterceptor
	var streamChain []grpc.StreamServerInterceptor
	for _, m := range sc.chain {
		var opts []grpclimit.Option
		if m.methods != nil {
			opts = append(opts, grpclimit.Methods(m.methods...))
		}
		if m.perMessage {
			opts = append(opts, grpclimit.PerMessage())
		}
		in, err := grpclimit.New(limiters[m.policy], opts...)
		if err != nil {
			t.Fatal(err)
		}
		unaryChain, streamChain = append(unaryChain, in.Unary), append(streamChain, in.Stream)
	}
	svc := &service{}
	tcp, unix := serve(t, svc, unaryChain, streamChain)
	conns := map[string]testpb.TestServiceClient{}
	client := func(from string) testpb.TestServiceClient {
		if c, ok := conns[from]; ok {
			return c
		}
		c := dial(t, tcp, unix, from)
		conns[from] = c
		return c
	}

	for i, st := range sc.steps {
		if st.advance > 0 {
			clock.Advance(st.advance)
		}
		switch st.store {
		case "fail":
			flaky.Fail()
		case "ok":
			flaky.Heal()
		}
		for n := range max(st.times, 1) {
			before := svc.ran.Load()
			got := do(t, client(st.client), st)
			where := fmt.Sprintf("step %d (%s %s), call %d", i+1, st.client, st.method, n+1)
			check(t, where, st.want, got, svc.ran.Load()-before, svc.received.Load())
		}
	}
	if cc := sc.concurrent; cc != nil {
		c := client(cc.client)
		var okN, limitedN, other atomic.Int64
		var wg sync.WaitGroup
		for range cc.clients {
			wg.Go(func() {
				switch got := do(t, c, step{method: empty}); got.code {
				case codes.OK:
					okN.Add(1)
				case codes.ResourceExhausted:
					limitedN.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		wg.Wait()
		if okN.Load() != int64(cc.allowed) || other.Load() != 0 {
			t.Errorf("%d concurrent calls: %d OK, %d ResourceExhausted, %d other; want exactly %d OK",
				cc.clients, okN.Load(), limitedN.Load(), other.Load(), cc.allowed)
		}
	}
}

// result is what one call got.
type result struct {
	code  codes.Code
	err   error
	delay time.Duration
	md    metadata.MD
}

func do(t *testing.T, c testpb.TestServiceClient, st step) result {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(st.md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, st.md...)
	}
	var hdr metadata.MD
	var err error
	switch st.method {
	case empty:
		_, err = c.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&hdr))
	case unary:
		req := &testpb.SimpleRequest{}
		if st.answer != codes.OK {
			req.ResponseStatus = &testpb.EchoStatus{Code: int32(st.answer)}
		}
		_, err = c.UnaryCall(ctx, req, grpc.Header(&hdr))
	case upload:
		var s testpb.TestService_StreamingInputCallClient
		s, err = c.StreamingInputCall(ctx)
		if err != nil {
			break
		}
		for range st.messages {
			if s.Send(&testpb.StreamingInputCallRequest{}) != nil {
				break // the server ended the stream: CloseAndRecv has its status
			}
		}
		_, err = s.CloseAndRecv()
		hdr, _ = s.Header()
		hdr = metadata.Join(hdr, s.Trailer())
	default:
		t.Fatalf("unknown method %q", st.method)
	}
	r := result{code: status.Code(err), err: err, delay: -1, md: hdr}
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			r.delay = ri.GetRetryDelay().AsDuration()
		}
	}
	return r
}

func check(t *testing.T, where string, w want, got result, ran, received int64) {
	t.Helper()
	if got.code != w.code {
		t.Errorf("%s: %v, want %v", where, got.err, w.code)
		return
	}
	if w.delay != 0 && got.delay != w.delay {
		t.Errorf("%s: RetryInfo delay %v, want %v (-1: none)", where, got.delay, w.delay)
	}
	if w.delay > 0 {
		if ra := got.md.Get("retry-after"); len(ra) != 1 || ra[0] != strconv.Itoa(int(w.delay/time.Second)) {
			t.Errorf("%s: retry-after metadata %q, want the RetryInfo delay %v", where, ra, w.delay)
		}
	}
	for k, v := range w.md {
		vals := got.md.Get(k)
		switch {
		case v == "-" && len(vals) > 0:
			t.Errorf("%s: metadata %s %q, want none", where, k, vals)
		case v != "-" && (len(vals) != 1 || vals[0] != v):
			t.Errorf("%s: metadata %s %q, want [%s]", where, k, vals, v)
		}
	}
	wantRan := int64(w.ran)
	if w.ran < 0 {
		wantRan = 0
		if w.code == codes.OK {
			wantRan = 1
		}
	}
	if ran != wantRan {
		t.Errorf("%s: the handler ran %d times, want %d", where, ran, wantRan)
	}
	if w.received > 0 && received != w.received {
		t.Errorf("%s: the handler received %d messages, want %d", where, received, w.received)
	}
}

// serve serves svc behind the chains on a loopback TCP listener and a Unix
// socket, and returns their addresses.
func serve(t *testing.T, svc *service, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) (tcp, unix string) {
	t.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	testpb.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "qg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	unix = filepath.Join(dir, "s") // short: Unix socket paths are limited to ~100 bytes
	uln, err := net.Listen("unix", unix)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	go srv.Serve(uln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), unix
}

// dial connects from the loopback address from, or over the Unix socket.
func dial(t *testing.T, tcp, unix, from string) testpb.TestServiceClient {
	t.Helper()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		if from == "unix" {
			var d net.Dialer
			return d.DialContext(ctx, "unix", unix)
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		return d.DialContext(ctx, "tcp", tcp)
	}
	cc, err := grpc.NewClient("passthrough:///"+tcp, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}
