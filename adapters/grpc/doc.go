// Package grpclimit puts a quotagate limit.Limiter in front of a gRPC
// server's calls, as unary and stream server interceptors.
//
//	l, err := limit.New(store, limit.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		log.Fatal(err) // names the offending field
//	}
//	in, err := grpclimit.New(l)
//	if err != nil {
//		log.Fatal(err)
//	}
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary), grpc.ChainStreamInterceptor(in.Stream))
//
// # Calls, buckets and methods
//
// A call is the engine's request with its full method name
// ("/package.Service/Method") as the route: a PerRoute policy gives every
// method its own bucket, a Shared one (the default) one bucket for all the
// methods the Interceptor decides. The full method name is also the path
// that Policy.SkipPaths compares, so SkipPaths:
// []string{"/grpc.health.v1.Health/Check"} leaves health checks unlimited.
// A stricter limit for some methods is a second Interceptor chained after
// the first, restricted with Methods:
//
//	login, _ := l.With(limit.Policy{Name: "login", Limit: 5, Window: time.Minute, Algorithm: limit.FixedWindow})
//	strict, _ := grpclimit.New(login, grpclimit.Methods("/auth.v1.Auth/Login"))
//	grpc.ChainUnaryInterceptor(in.Unary, strict.Unary)
//
// grpc answers a method no service registered with Unimplemented before
// any interceptor runs; behind a grpc.UnknownServiceHandler such calls
// reach Stream, which passes them as unmatched (limit.Request.Unmatched):
// they count in the Shared bucket, whatever name the client invented.
//
// A stream is decided once, when it opens, at the policy's cost; with the
// PerMessage option an Interceptor decides every message the server
// receives on the stream instead (its cost, its price from CostFunc).
//
// # Identity
//
// The identity is the socket peer that gRPC's peer.FromContext reports
// (the transport's address; a Unix-socket peer has none and draws on the
// fallback bucket), never a metadata value, unless the Limiter trusts a
// header: WithTrustedProxies reads the metadata key x-forwarded-for only
// when the peer is a trusted proxy, WithTrustedHeader its key
// (x-forwarded-for, forwarded, x-real-ip...) on every call. Metadata keys are the HTTP/2
// header fields, so the forwarding header an Envoy or a gRPC gateway sets
// arrives as metadata under the same name. A key of the application's own
// (an API key from the metadata, a field of the request message) is a
// KeyFunc over *Call:
//
//	limit.Policy{KeyFunc: grpclimit.KeyFunc(func(c *grpclimit.Call) (string, error) {
//		return c.Metadata("x-api-key"), nil
//	})}
//
// PlanFunc and CostFunc take the same *Call, to choose the call's plan
// (Policy.Plan) or price it (Policy.CostFunc).
//
// # Denials
//
// A limited call fails with codes.ResourceExhausted (codes.Unavailable
// under FailClosed) and the handler does not run. When the engine
// discloses a Retry-After (the default), the status carries a
// google.rpc.RetryInfo detail whose retry delay is that many seconds:
//
//	for _, d := range status.Convert(err).Details() {
//		if ri, ok := d.(*errdetails.RetryInfo); ok {
//			wait := ri.GetRetryDelay().AsDuration()
//		}
//	}
//
// The status message is the title of the engine's problem body ("Too Many
// Requests"). A cost no wait can admit fails with ResourceExhausted
// without RetryInfo. The engine's header fields become response header
// metadata, in lower case: retry-after, and as the Disclosure level asks,
// ratelimit-policy and ratelimit (or the Triplet and Legacy fields);
// Content-Type and Cache-Control describe an HTTP body and are left out.
// Chained interceptors each add their values, in chain order. A
// PerMessage denial has them in the trailer, as the header has gone out.
// A Policy.LimitedResponse's status becomes the code google.rpc.Code maps
// it to (Code), its body the message.
//
// # After the call
//
// When the handler returns, the call is settled (limit.Limiter.Finish)
// with the HTTP status of the gRPC code it ended with (HTTPStatus:
// InvalidArgument 400, Internal 500, ...), so that Policy.CountStatus gives
// back the charge of a call it does not count. An interceptor whose call a
// later interceptor in the chain limited gives its charge back too: a call
// limited by any interceptor charges none.
//
// # Cost
//
// On an allowed call at the default disclosure the interceptor allocates
// nothing (the peer's address text is cached per connection) and costs
// about what the engine's Check costs an HTTP request. By default grpc runs
// every call on a fresh goroutine, whose stack the decision, a few KB
// deeper than grpc's own path, grows on each call (runtime.copystack in a
// CPU profile); grpc.NumStreamWorkers keeps handler goroutines, and their
// stacks, from one call to the next.
//
// The adapter holds no policy: it hands the engine the call
// (limit.Limiter.Check, through the limit.ResponseWriter it implements over
// metadata) and turns the engine's answer into the call's metadata and
// status.
package grpclimit
