package grpclimit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	limit "github.com/quotagate/quotagate/engine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Interceptor decides the calls of a gRPC server with one Limiter: its
// Unary and Stream methods are the server interceptors. It is safe for
// concurrent use; one Interceptor may serve several servers, and its
// Limiter may be shared by other Interceptors and HTTP mounts, which then
// draw on the same buckets.
type Interceptor struct {
	lim        *limit.Limiter
	methods    map[string]struct{} // exact full method names; nil with services: see decides
	services   []string            // "/package.Service/" prefixes
	perMessage bool
	peers      peerCache
	calls      sync.Pool // *call
}

// Option configures an Interceptor.
type Option func(*Interceptor) error

// New returns an Interceptor deciding calls with l. Errors name the
// offending option: a nil Limiter, a Methods entry that is not a full
// method name ("/package.Service/Method") or a service ("/package.Service/").
func New(l *limit.Limiter, opts ...Option) (*Interceptor, error) {
	if l == nil {
		return nil, errors.New("grpclimit: New: the Limiter is nil")
	}
	in := &Interceptor{lim: l}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(in); err != nil {
			return nil, err
		}
	}
	in.calls.New = func() any { return new(call) }
	return in, nil
}

// Methods makes the Interceptor decide only calls to the named methods: a
// full method name ("/grpc.health.v1.Health/Check") or a whole service
// ("/grpc.health.v1.Health/"). Calls to other methods pass untouched,
// uncounted. Several Methods options add up. Without it every call is
// decided.
func Methods(names ...string) Option {
	return func(in *Interceptor) error {
		for _, n := range names {
			svc, method, ok := strings.Cut(strings.TrimPrefix(n, "/"), "/")
			if !strings.HasPrefix(n, "/") || !ok || svc == "" || strings.Contains(method, "/") || strings.ContainsAny(n, " \t\r\n") {
				return fmt.Errorf("grpclimit: Methods(%q): not a full method name (/package.Service/Method) nor a service (/package.Service/)", n)
			}
			if method == "" {
				in.services = append(in.services, n)
				continue
			}
			if in.methods == nil {
				in.methods = make(map[string]struct{})
			}
			in.methods[n] = struct{}{}
		}
		if len(names) == 0 {
			return errors.New("grpclimit: Methods(): no method named; leave the option out to decide every call")
		}
		return nil
	}
}

// PerMessage makes Stream charge every message the server receives on a
// stream (RecvMsg) instead of the stream's opening: each message is one
// decision at the Policy's Cost, or CostFunc's price of it (Call.Message).
// A limited message makes RecvMsg return the denial (the message is
// dropped) with the numbers in the trailer; the stream stays open, and a
// handler that returns the error ends it with that status. Per-message
// decisions are never given back (CountStatus does not apply to them) and
// disclose their fields only on a denial. Stacking a Stream without it in
// front charges the opening as well. Unary calls are unaffected.
func PerMessage() Option {
	return func(in *Interceptor) error {
		in.perMessage = true
		return nil
	}
}

// Call is the engine's Native value for a gRPC call: what a typed key or
// cost function (KeyFunc, CostFunc) sees. It is valid only during the
// function's call.
type Call struct {
	// Method is the full method name, "/package.Service/Method".
	Method string
	// Message is the request message of a unary call, or the received
	// message of a PerMessage decision; nil when a stream opens.
	Message any

	ctx context.Context
}

// Context returns the call's context: its incoming metadata, peer and
// deadline.
func (c *Call) Context() context.Context { return c.ctx }

// Metadata returns the first value of the call's incoming metadata key
// (case-insensitive), "" when absent.
func (c *Call) Metadata(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// KeyFunc adapts a key function over *Call to Policy.KeyFunc, e.g. to limit
// by an API key from the metadata (c.Metadata("x-api-key")) or by a field of
// the request message: limit.KeyFuncOf, which explains blank results,
// errors, panics and a key function mounted under another adapter.
func KeyFunc(f func(c *Call) (string, error)) func(limit.Request) (string, error) {
	return limit.KeyFuncOf(f)
}

// CostFunc adapts a pricing function over *Call to Policy.CostFunc:
// limit.CostFuncOf.
func CostFunc(f func(c *Call) int64) func(limit.Request) int64 { return limit.CostFuncOf(f) }

// PlanFunc adapts a plan function over *Call to Policy.Plan, e.g. to choose
// a call's plan from its API key in the metadata: limit.PlanFuncOf, which
// explains errors, panics and a plan function mounted under another
// adapter.
func PlanFunc(f func(c *Call) (string, error)) func(limit.Request) (string, error) {
	return limit.PlanFuncOf(f)
}

// Unary is the grpc.UnaryServerInterceptor: it decides the call before
// handler runs. An allowed call runs handler, with the engine's fields in
// the response header metadata (none at the default disclosure); a limited
// call gets the denial (see the package documentation) and handler does not
// run. Once handler has returned, the call is settled (limit.Limiter.Finish)
// with the HTTP status of its gRPC code (HTTPStatus): CountStatus refunds,
// and an interceptor after this one that limited the call makes this one
// give its charge back.
func (in *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !in.decides(info.FullMethod) {
		return handler(ctx, req)
	}
	c := in.get(ctx, info.FullMethod, req)
	in.check(c, false)
	if c.md != nil {
		_ = grpc.SetHeader(ctx, c.md) // an error means no header can be sent any more: nothing to do
	}
	if !c.d.Allowed {
		err := c.denial(true)
		in.put(c)
		return nil, err
	}
	panicked := true
	defer in.settlePanic(ctx, c, &panicked)
	resp, err := handler(ctx, req)
	panicked = false
	in.finish(ctx, c, err)
	return resp, err
}

// Stream is the grpc.StreamServerInterceptor: it decides a stream when it
// opens (with PerMessage: each message it receives instead), as Unary
// decides a call, and settles it when handler returns. A call that grpc
// hands to the server's UnknownServiceHandler (a method no service
// registered) is unmatched (limit.Request.Unmatched): it counts in the
// policy's Shared bucket, a PerRoute policy's included, with an empty
// handler label, so that clients cannot make a bucket or a metrics label
// per invented method name.
func (in *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !in.decides(info.FullMethod) {
		return handler(srv, ss)
	}
	if in.perMessage {
		return handler(srv, &meteredStream{ServerStream: ss, in: in, method: info.FullMethod})
	}
	ctx := ss.Context()
	c := in.get(ctx, info.FullMethod, nil)
	// grpc runs its UnknownServiceHandler, for a method no service
	// registered, with a nil service: no route serves the call.
	in.check(c, srv == nil)
	if c.md != nil {
		_ = ss.SetHeader(c.md)
	}
	if !c.d.Allowed {
		err := c.denial(true)
		in.put(c)
		return err
	}
	panicked := true
	defer in.settlePanic(ctx, c, &panicked)
	err := handler(srv, ss)
	panicked = false
	in.finish(ctx, c, err)
	return err
}

// settlePanic settles the call of a handler that panicked (the panic goes
// on up): a Concurrency slot is given back, a charge stays counted, and c
// is not returned to the pool.
func (in *Interceptor) settlePanic(ctx context.Context, c *call, panicked *bool) {
	if *panicked {
		in.lim.Finish(ctx, &c.d, 0)
	}
}

// check decides call c with the Limiter (unmatched: no service serves
// it), writing through c, into c.d. The Decision lives in c and check is
// never inlined, so that neither it nor Check's frames stay on the stack
// under the handler: grpc starts every call on a fresh goroutine, whose
// stack grows (is copied) when the call goes deeper than it. The decision
// itself fits in the stack grpc's own path has grown by then
// (TestAllowedUnaryCallKeepsItsStack).
//
//go:noinline
func (in *Interceptor) check(c *call, unmatched bool) {
	r := in.request(c)
	r.Unmatched = unmatched
	c.d = in.lim.Check(c.ctx, r, c)
}

// decides reports whether the Interceptor decides calls to method.
func (in *Interceptor) decides(method string) bool {
	if in.methods == nil && in.services == nil {
		return true
	}
	if _, ok := in.methods[method]; ok {
		return true
	}
	for _, s := range in.services {
		if strings.HasPrefix(method, s) {
			return true
		}
	}
	return false
}

// finish settles an admitted call whose handler returned err, and returns
// c to the pool: when an interceptor after this one limited the call at its
// opening, c (the flag of its Decision's charge) is flagged limited, so
// that Finish gives this charge back.
func (in *Interceptor) finish(ctx context.Context, c *call, err error) {
	if err != nil {
		if le, ok := errors.AsType[*limitedError](err); ok && le.atOpen {
			c.SetLimited()
		}
	}
	in.lim.Finish(ctx, &c.d, HTTPStatus(status.Code(err)))
	in.put(c)
}

// request is the engine's view of call c. gRPC calls are HTTP/2 POSTs; the
// full method name is both the route (the PerRoute bucket, the handler
// label) and the path (SkipPaths).
func (in *Interceptor) request(c *call) limit.Request {
	return limit.Request{
		Route:  c.Method,
		Method: http.MethodPost,
		Path:   c.Method,
		Peer:   in.peers.text(c.ctx),
		Header: (*mdHeader)(c),
		Native: &c.Call,
	}
}

func (in *Interceptor) get(ctx context.Context, method string, msg any) *call {
	c := in.calls.Get().(*call)
	c.Call = Call{Method: method, Message: msg, ctx: ctx}
	return c
}

// put returns c to the pool once the engine is done with it: after Finish,
// as c is the flag the Decision's charge reads. A call that wrote metadata
// keeps none of it: grpc owns the MD it was given.
func (in *Interceptor) put(c *call) {
	*c = call{}
	in.calls.Put(c)
}

// meteredStream is a ServerStream whose received messages are each decided
// (PerMessage).
type meteredStream struct {
	grpc.ServerStream
	in     *Interceptor
	method string
}

// RecvMsg receives a message and decides it; a limited message returns the
// denial, with the engine's fields in the trailer.
func (s *meteredStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	in := s.in
	c := in.get(s.Context(), s.method, m)
	in.check(c, false)
	var err error
	if !c.d.Allowed {
		if c.md != nil {
			s.SetTrailer(c.md)
		}
		err = c.denial(false)
	} else {
		// A message holds nothing past its decision: a Concurrency
		// slot is given back at once (for a rate, Finish does nothing).
		in.lim.Finish(s.Context(), &c.d, 0)
	}
	in.put(c)
	return err
}

// call is one decision's working state, pooled: the Native value, the
// limit.ResponseWriter that turns the engine's response into metadata and
// a status, the Decision (the call's ticket for Finish) and the call's
// limited flag (SetLimited, Limited), which the Decision's charge holds
// until Finish.
type call struct {
	Call
	d       limit.Decision
	md      metadata.MD
	status  int
	body    []byte
	ctype   string
	retry   string // the Retry-After field, whole seconds
	limited bool
}

// SetLimited flags the call as limited (by this interceptor, or by one
// after it).
func (c *call) SetLimited() { c.limited = true }

// Limited reports whether the call was flagged limited.
func (c *call) Limited() bool { return c.limited }

var (
	_ limit.ResponseWriter = (*call)(nil)
	_ limit.Header         = (*mdHeader)(nil)
)

// Get returns the first value of the field name in this call's metadata.
func (c *call) Get(name string) string {
	if v := c.md[mdKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the field name. Content-Type and Cache-Control describe an
// HTTP body and are not metadata; Retry-After is kept for the RetryInfo
// detail too.
func (c *call) Set(name, value string) {
	switch name {
	case "Content-Type":
		c.ctype = value
		return
	case "Cache-Control", "Content-Length":
		return
	case "Retry-After":
		c.retry = value
	}
	if c.md == nil {
		c.md = metadata.MD{}
	}
	c.md[mdKey(name)] = []string{value}
}

// Add appends a value to the field name.
func (c *call) Add(name, value string) {
	if name == "Content-Type" || name == "Cache-Control" || name == "Content-Length" {
		c.Set(name, value)
		return
	}
	if c.md == nil {
		c.md = metadata.MD{}
	}
	k := mdKey(name)
	c.md[k] = append(c.md[k], value)
}

// Send records the status and body of a limited call; denial turns them
// into the call's error.
func (c *call) Send(status int, body []byte) {
	c.status, c.body = status, body
}

// mdKey is the metadata key of an HTTP field name: lower case, as gRPC
// metadata keys are.
func mdKey(name string) string {
	switch name {
	case "Retry-After":
		return "retry-after"
	case "Ratelimit-Policy":
		return "ratelimit-policy"
	case "Ratelimit":
		return "ratelimit"
	case "Ratelimit-Limit":
		return "ratelimit-limit"
	case "Ratelimit-Remaining":
		return "ratelimit-remaining"
	case "Ratelimit-Reset":
		return "ratelimit-reset"
	case "X-Ratelimit-Limit":
		return "x-ratelimit-limit"
	case "X-Ratelimit-Remaining":
		return "x-ratelimit-remaining"
	case "X-Ratelimit-Reset":
		return "x-ratelimit-reset"
	}
	return strings.ToLower(name)
}

// denial is the error of a limited call: the gRPC code of the engine's
// status (ResourceExhausted for 429, Unavailable for 503), the message of
// its body, and a google.rpc.RetryInfo detail whose delay is the
// Retry-After field when the engine wrote one.
func (c *call) denial(atOpen bool) error {
	st := status.New(Code(c.status), c.message())
	if secs, err := strconv.ParseInt(c.retry, 10, 64); err == nil && secs > 0 {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(secondsDuration(secs))}); err == nil {
			st = withInfo
		}
	}
	return &limitedError{st: st, atOpen: atOpen}
}

// message is the status message of the engine's body: the title of an RFC
// 9457 problem (its detail, when it has one), the text of another body, or
// the status text when there is no body.
func (c *call) message() string {
	const maxMessage = 1024
	if len(c.body) == 0 {
		return http.StatusText(c.status)
	}
	msg := string(c.body)
	if strings.Contains(c.ctype, "json") {
		var p struct{ Title, Detail string }
		if json.Unmarshal(c.body, &p) == nil && (p.Title != "" || p.Detail != "") {
			msg = cmp.Or(p.Detail, p.Title)
		}
	}
	// A status message must be valid UTF-8 (grpc cannot marshal one that is
	// not and sends the status without its details, the RetryInfo) and
	// short (it travels in a header, which clients cap at 8 KiB or so).
	msg = strings.ToValidUTF8(strings.TrimSpace(msg), "\uFFFD")
	if len(msg) > maxMessage {
		n := maxMessage
		for !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	return msg
}

// limitedError is the error a limited call returns: its status is what the
// client receives, and an interceptor in front of the one that limited the
// call recognises it and gives its own charge back.
type limitedError struct {
	st     *status.Status
	atOpen bool // limited when the call opened, not a PerMessage denial
}

func (e *limitedError) Error() string { return e.st.Err().Error() }

// GRPCStatus is the status the server sends (status.FromError).
func (e *limitedError) GRPCStatus() *status.Status { return e.st }

// mdHeader is limit.Header over a call's incoming metadata. The engine
// reads it only for a configured trusted header, and WithTrustedProxies
// reads it only when the peer is a trusted proxy.
type mdHeader call

// Values returns every value of the metadata key name (case-insensitive).
func (h *mdHeader) Values(name string) []string {
	return metadata.ValueFromIncomingContext(h.ctx, name)
}

// peerCache remembers the text of recent TCP peer addresses, so that the
// allowed path does not render the same address for every call. gRPC's
// peer.Peer carries the connection's net.Addr, the same *net.TCPAddr for
// every call on a connection: it is the key (by identity), in a
// direct-mapped table of 1024 slots, lock-free; an entry holds its
// address, which therefore cannot be reused for another connection while
// cached. Connections whose addresses collide in a slot take turns in it,
// rendering their text again when they find the other's.
type peerCache struct {
	slots [peerSlots]atomic.Pointer[peerText]
}

const peerSlots = 1024

type peerText struct {
	addr *net.TCPAddr
	text string
}

// text returns the socket peer of the call in ctx ("" when unknown): the
// transport's address, never a metadata value.
func (pc *peerCache) text(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	a, ok := p.Addr.(*net.TCPAddr)
	if !ok {
		return p.Addr.String()
	}
	h := uintptr(unsafe.Pointer(a))
	slot := &pc.slots[(h>>4^h>>12)%peerSlots]
	if e := slot.Load(); e != nil && e.addr == a {
		return e.text
	}
	e := &peerText{addr: a, text: a.String()}
	slot.Store(e)
	return e.text
}
