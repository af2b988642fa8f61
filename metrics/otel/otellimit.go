package otellimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the Meter the Observer uses.
const ScopeName = "github.com/quotagate/quotagate/metrics/otel"

// Instrument names, as created on the Meter.
const (
	Requests          = "quotagate.requests"
	Refunds           = "quotagate.refunds"
	Issues            = "quotagate.issues"
	StoreErrors       = "quotagate.store.errors"
	StoreDuration     = "quotagate.store.duration"
	StoreSkipped      = "quotagate.store.skipped"
	StoreBreakerOpen  = "quotagate.store.breaker.open"
	StoreBreakerOpens = "quotagate.store.breaker.opens"
	StoreEvictions    = "quotagate.store.evictions"
	StoreMayEvict     = "quotagate.store.may_evict"
	Wait              = "quotagate.wait"
)

// ErrInvalidOption means New rejected an Option; the wrapped message names
// the option.
var ErrInvalidOption = errors.New("otellimit: invalid option")

// WaitBuckets returns the fixed explicit bucket boundaries, in seconds, of
// quotagate.wait (promlimit's): 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30
// 60 300. Each call returns a fresh slice.
func WaitBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
}

// DefaultDurationBuckets returns the default explicit bucket boundaries, in
// seconds, of quotagate.store.duration: promlimit's, a 1-2.5-5 series from
// 50 µs to 1 s. Each call returns a fresh slice.
func DefaultDurationBuckets() []float64 {
	return []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
}

type config struct {
	buckets []float64
}

// Option configures New.
type Option func(*config) error

// WithDurationBuckets replaces the explicit bucket boundaries (seconds) of
// quotagate.store.duration (default DefaultDurationBuckets). They must be
// finite, positive and strictly increasing; at least one is required. A View
// of the SDK may still override them.
func WithDurationBuckets(upper ...float64) Option {
	return func(c *config) error {
		if len(upper) == 0 {
			return fmt.Errorf("%w: WithDurationBuckets: no buckets", ErrInvalidOption)
		}
		for i, b := range upper {
			if math.IsNaN(b) || math.IsInf(b, 0) || b <= 0 {
				return fmt.Errorf("%w: WithDurationBuckets: bucket %d is %v, want a finite positive number of seconds", ErrInvalidOption, i, b)
			}
			if i > 0 && b <= upper[i-1] {
				return fmt.Errorf("%w: WithDurationBuckets: bucket %d (%v) is not above bucket %d (%v)", ErrInvalidOption, i, b, i-1, upper[i-1])
			}
		}
		c.buckets = append([]float64(nil), upper...)
		return nil
	}
}

// Observer records the engine's events as OpenTelemetry measurements; pass
// it to limit.WithObserver (and to a guarded store's observer option, such
// as redisstore.WithObserver). It is safe for concurrent use, and one
// Observer may serve any number of Limiters.
//
// Each attribute set is built once, with its measurement options, and
// cached: an event with an already seen set allocates nothing in this
// package and takes no lock (a map lookup); what the SDK's instrument does
// with the measurement is the SDK's (see the package tests for the counts
// with the OTel SDK). The cache holds up to 4096 sets per instrument; past
// that events are still recorded, with a set built per call.
type Observer struct {
	meter     metric.Meter
	requests  metric.Int64Counter
	refunds   metric.Int64Counter
	issues    metric.Int64Counter
	storeErrs metric.Int64Counter
	durations metric.Float64Histogram
	waits     metric.Float64Histogram
	skipped   metric.Int64Counter
	open      metric.Int64Gauge
	opens     metric.Int64Counter
	evictions metric.Int64ObservableCounter
	mayEvict  metric.Int64ObservableGauge

	reqCache   cache[requestKey, []metric.AddOption]
	refCache   cache[refundKey, []metric.AddOption]
	issueCache cache[issueKey, []metric.AddOption]
	errCache   cache[storeErrKey, []metric.AddOption]
	durCache   cache[durationKey, []metric.RecordOption]
	waitCache  cache[waitKey, []metric.RecordOption]
	skipCache  cache[skipKey, []metric.AddOption]

	slots     metric.Int64UpDownCounter // slots.go
	slotCache cache[string, []metric.AddOption]

	blocks blockSide // blocks.go
}

var _ limit.Observer = (*Observer)(nil)

type requestKey struct {
	bucket, handler string
	outcome         limit.Outcome
	source          limit.KeySource
	plan            string
}

type refundKey struct{ bucket, reason string }

type issueKey struct {
	bucket string
	kind   limit.Issue
}

type storeErrKey struct {
	bucket string
	mode   limit.FailureMode
}

type durationKey struct{ store, op string }

type waitKey struct {
	bucket string
	served bool
}

type skipKey struct{ store, reason string }

// outcomes are created together, as promlimit creates them: the first event
// of a (bucket, handler, key_source, plan) also adds 0 to its other outcomes, so
// that a rate over the series sees the first limited or degraded request.
var outcomes = [...]limit.Outcome{limit.OutcomeAllowed, limit.OutcomeLimited, limit.OutcomeDegraded}

// New returns an Observer whose instruments are created on mp's Meter named
// ScopeName. mp nil is an error (pass otel.GetMeterProvider() to use the
// global one, or a noop provider to record nothing). Instrument and option
// errors are returned; option errors wrap ErrInvalidOption.
func New(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	if mp == nil {
		return nil, errors.New("otellimit: New: nil MeterProvider")
	}
	cfg := config{buckets: DefaultDurationBuckets()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	m := mp.Meter(ScopeName)
	o := &Observer{meter: m}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	o.requests, err = m.Int64Counter(Requests, metric.WithUnit("{request}"),
		metric.WithDescription("Rate-limit decisions by bucket, route template (handler), outcome (allowed, limited, degraded, shadow-limited), identity source (key_source) and plan (\"\" for an unnamed default plan). An allowed request later refunded is also in quotagate.refunds."))
	add(err)
	o.refunds, err = m.Int64Counter(Refunds, metric.WithUnit("{request}"),
		metric.WithDescription("Allowed requests whose charge was given back to the bucket, by bucket and reason (later-mount: a later mount limited the request; status: CountStatus did not count its status). Served = allowed - refunded."))
	add(err)
	o.issues, err = m.Int64Counter(Issues, metric.WithUnit("{request}"),
		metric.WithDescription("Requests that met a configuration or input problem (client address, route, plan, a user function that failed), by bucket and kind."))
	add(err)
	o.storeErrs, err = m.Int64Counter(StoreErrors, metric.WithUnit("{call}"),
		metric.WithDescription("Failed rate-limit store calls (errors, timeouts, panics) by bucket and the failure mode applied."))
	add(err)
	o.durations, err = m.Float64Histogram(StoreDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of rate-limit store calls in seconds, failed calls included, by store and operation."),
		metric.WithExplicitBucketBoundaries(cfg.buckets...))
	add(err)
	o.waits, err = m.Float64Histogram(Wait, metric.WithUnit("s"),
		metric.WithDescription("Time requests waited for the slot they reserved (Policy.MaxWait), in seconds, by bucket and result (served: admitted at its slot; cancelled: its context ended first and the slot was given back). The count is the requests that waited."),
		metric.WithExplicitBucketBoundaries(WaitBuckets()...))
	add(err)
	o.skipped, err = m.Int64Counter(StoreSkipped, metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of a store that does I/O that were made without calling it, by store and reason: deny-cache or breaker-open."))
	add(err)
	o.open, err = m.Int64Gauge(StoreBreakerOpen,
		metric.WithDescription("1 while the store's circuit breaker is open, 0 once it closed again."))
	add(err)
	o.opens, err = m.Int64Counter(StoreBreakerOpens, metric.WithUnit("{opening}"),
		metric.WithDescription("Times the store's circuit breaker opened."))
	add(err)
	o.evictions, err = m.Int64ObservableCounter(StoreEvictions, metric.WithUnit("{entry}"),
		metric.WithDescription("Entries a rate-limit store removed to bound its memory, by store and reason: expired (past their time to live) or live (evicted before it to make room)."))
	add(err)
	o.mayEvict, err = m.Int64ObservableGauge(StoreMayEvict,
		metric.WithDescription("1 when the rate-limit store's server may evict the limiter's state under its memory policy (each evicted key gives its client a fresh quota), else 0; by store and the server's policy."))
	add(err)
	add(o.blocks.create(m))
	o.slots, err = newSlots(m)
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otellimit: New: %w", err)
	}
	return o, nil
}

// label makes an attribute value safe to keep: a copy (the engine's strings
// may be borrowed from a framework's reused buffer) that is valid UTF-8, as
// promlimit's label values are.
func label(s string) string {
	return strings.Clone(strings.ToValidUTF8(s, "\uFFFD"))
}

func addOpts(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// bg is the context of every measurement: the engine's events carry none,
// so no exemplar is ever taken from a request's span.
var bg = context.Background()

// Decision counts one decision in quotagate.requests.
func (o *Observer) Decision(e limit.DecisionEvent) {
	k := requestKey{e.Bucket, e.Handler, e.Outcome, e.KeySource, e.Plan}
	opts, ok := o.reqCache.get(k)
	if !ok {
		opts = o.resolveRequest(k)
	}
	o.requests.Add(bg, 1, opts...)
	if e.Blocked {
		o.blocks.inc(e.Bucket, e.Plan)
	}
}

func (o *Observer) resolveRequest(k requestKey) []metric.AddOption {
	k = requestKey{label(k.bucket), label(k.handler), limit.Outcome(label(string(k.outcome))), limit.KeySource(label(string(k.source))), label(k.plan)}
	set := func(k requestKey) []metric.AddOption {
		return o.reqCache.put(k, addOpts(
			attribute.String("bucket", k.bucket), attribute.String("handler", k.handler),
			attribute.String("outcome", string(k.outcome)), attribute.String("key_source", string(k.source)),
			attribute.String("plan", k.plan)))
	}
	for _, out := range outcomes {
		if out != k.outcome {
			sib := k
			sib.outcome = out
			if _, ok := o.reqCache.get(sib); !ok {
				o.requests.Add(bg, 0, set(sib)...)
			}
		}
	}
	return set(k)
}

// Refund counts one given-back charge in quotagate.refunds.
func (o *Observer) Refund(bucket, reason string) {
	k := refundKey{bucket, reason}
	opts, ok := o.refCache.get(k)
	if !ok {
		k = refundKey{label(bucket), label(reason)}
		opts = o.refCache.put(k, addOpts(attribute.String("bucket", k.bucket), attribute.String("reason", k.reason)))
	}
	o.refunds.Add(bg, 1, opts...)
}

// Issue counts one request in quotagate.issues.
func (o *Observer) Issue(bucket string, kind limit.Issue) {
	k := issueKey{bucket, kind}
	opts, ok := o.issueCache.get(k)
	if !ok {
		k = issueKey{label(bucket), limit.Issue(label(string(kind)))}
		opts = o.issueCache.put(k, addOpts(attribute.String("bucket", k.bucket), attribute.String("kind", string(k.kind))))
	}
	o.issues.Add(bg, 1, opts...)
}

// StoreError counts one failed store call in quotagate.store.errors;
// failure_mode is mode.String() (open, local, closed).
func (o *Observer) StoreError(bucket string, mode limit.FailureMode) {
	k := storeErrKey{bucket, mode}
	opts, ok := o.errCache.get(k)
	if !ok {
		k.bucket = label(bucket)
		opts = o.errCache.put(k, addOpts(attribute.String("bucket", k.bucket), attribute.String("failure_mode", mode.String())))
	}
	o.storeErrs.Add(bg, 1, opts...)
}

// StoreDuration records one store call in quotagate.store.duration, in
// seconds.
func (o *Observer) StoreDuration(store, op string, d time.Duration) {
	k := durationKey{store, op}
	opts, ok := o.durCache.get(k)
	if !ok {
		k = durationKey{label(store), label(op)}
		opts = o.durCache.put(k, []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("store", k.store), attribute.String("op", k.op)))})
	}
	o.durations.Record(bg, d.Seconds(), opts...)
}

// Wait records one request that waited for its reserved slot in
// quotagate.wait, in seconds, result "served" or "cancelled".
func (o *Observer) Wait(bucket string, waited time.Duration, served bool) {
	k := waitKey{bucket, served}
	opts, ok := o.waitCache.get(k)
	if !ok {
		k.bucket = label(bucket)
		result := "cancelled"
		if served {
			result = "served"
		}
		opts = o.waitCache.put(k, []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("bucket", k.bucket), attribute.String("result", result)))})
	}
	o.waits.Record(bg, waited.Seconds(), opts...)
}

// StoreEvent counts one decision made without calling the store in
// quotagate.store.skipped (events "deny-cache" and "breaker-open", the
// reason attribute), or records a transition of a store's circuit breaker
// (events "opened" and "closed"): quotagate.store.breaker.open is set to 1
// or 0, and an opening counts in quotagate.store.breaker.opens (a closing
// adds 0 to it, so that its series exists before the next opening).
func (o *Observer) StoreEvent(store, event string) {
	if event == "opened" || event == "closed" {
		set := attribute.NewSet(attribute.String("store", label(store)))
		var n int64
		if event == "opened" {
			n = 1
		}
		o.open.Record(bg, n, metric.WithAttributeSet(set))
		o.opens.Add(bg, n, metric.WithAttributeSet(set))
		return
	}
	k := skipKey{store, event}
	opts, ok := o.skipCache.get(k)
	if !ok {
		k = skipKey{label(store), label(event)}
		opts = o.skipCache.put(k, addOpts(attribute.String("store", k.store), attribute.String("reason", k.reason)))
	}
	o.skipped.Add(bg, 1, opts...)
}

// EvictionCounter is implemented by stores that bound their memory by
// removing entries, such as the memory store (memstore.Store): Evictions
// returns the entries removed since the store was created, expired (past
// their time to live) and live (evicted before it to make room). It must be
// safe for concurrent use; it is called once per collection.
type EvictionCounter interface {
	Evictions() (expired, live uint64)
}

// RegisterEvictions reports c's evictions in quotagate.store.evictions
// {store, reason}, read at each collection: store is the store's name (the
// store attribute of quotagate.store.duration, e.g. "memory"), reason
// "expired" or "live". Unregister the returned Registration to stop.
func (o *Observer) RegisterEvictions(store string, c EvictionCounter) (metric.Registration, error) {
	if c == nil {
		return nil, errors.New("otellimit: RegisterEvictions: nil EvictionCounter")
	}
	store = label(store)
	expired := metric.WithAttributeSet(attribute.NewSet(attribute.String("store", store), attribute.String("reason", "expired")))
	live := metric.WithAttributeSet(attribute.NewSet(attribute.String("store", store), attribute.String("reason", "live")))
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		e, l := c.Evictions()
		obs.ObserveInt64(o.evictions, clampInt64(e), expired)
		obs.ObserveInt64(o.evictions, clampInt64(l), live)
		return nil
	}, o.evictions)
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// EvictionPolicyReader is implemented by stores on a server whose memory
// policy may drop their state, such as the Redis store (redisstore.Store):
// EvictionPolicy returns the server's policy as read when the store
// connected ("noeviction", "allkeys-lru", ...; "" when it could not be
// read) and whether the server may evict the limiter's keys under it. It
// must be safe for concurrent use; it is called once per collection.
type EvictionPolicyReader interface {
	EvictionPolicy() (policy string, evicts bool)
}

// RegisterEvictionPolicy reports r's policy in quotagate.store.may_evict
// {store, policy}, read at each collection: 1 when the store's server may
// evict the limiter's state (every allkeys-* and volatile-* policy of
// Redis: an evicted key gives its client a fresh quota), else 0; store is
// the store's name (e.g. "redis"), policy the server's ("unknown" when the
// store could not read it, "other" for a name outside Redis's). It is
// promlimit.NewEvictionPolicyCollector's counterpart. Unregister the
// returned Registration to stop.
func (o *Observer) RegisterEvictionPolicy(store string, r EvictionPolicyReader) (metric.Registration, error) {
	if r == nil {
		return nil, errors.New("otellimit: RegisterEvictionPolicy: nil EvictionPolicyReader")
	}
	store = label(store)
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		policy, evicts := r.EvictionPolicy()
		policy = limitstore.EvictionPolicyLabel(policy)
		var v int64
		if evicts {
			v = 1
		}
		obs.ObserveInt64(o.mayEvict, v, metric.WithAttributes(attribute.String("store", store), attribute.String("policy", policy)))
		return nil
	}, o.mayEvict)
}
