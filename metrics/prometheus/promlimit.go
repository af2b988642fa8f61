package promlimit

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	limit "github.com/quotagate/quotagate/engine"
)

// Metric names, as exposed.
const (
	RequestsTotal        = "quotagate_requests_total"
	RefundsTotal         = "quotagate_refunds_total"
	IssuesTotal          = "quotagate_issues_total"
	StoreErrorsTotal     = "quotagate_store_errors_total"
	StoreDurationSeconds = "quotagate_store_duration_seconds"
	WaitSeconds          = "quotagate_wait_seconds"
)

// WaitBuckets returns the fixed upper bounds, in seconds, of
// quotagate_wait_seconds (the waits of Policy.MaxWait, at most an hour):
// 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 300. Each call returns a
// fresh slice.
func WaitBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
}

// ErrInvalidOption means New rejected an Option; the wrapped message names
// the option.
var ErrInvalidOption = errors.New("promlimit: invalid option")

// DefaultDurationBuckets returns the default upper bounds, in seconds, of
// quotagate_store_duration_seconds: a 1-2.5-5 series from 50 µs (an
// in-process store, a Redis round trip on one host) to 1 s (far past the
// default 100 ms store timeout, so that a timeout lands in a bucket of its
// own): 0.00005 0.0001 0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1
// 0.25 0.5 1. Each call returns a fresh slice.
func DefaultDurationBuckets() []float64 {
	return []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
}

type config struct {
	buckets []float64
}

// Option configures New.
type Option func(*config) error

// WithDurationBuckets replaces the histogram bucket upper bounds (seconds) of
// quotagate_store_duration_seconds (default DefaultDurationBuckets). They must
// be finite, positive and strictly increasing; at least one is required.
// When New reuses an already registered histogram, that histogram keeps its
// own buckets.
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

// Observer records the engine's events as Prometheus metrics; pass it to
// limit.WithObserver. It is safe for concurrent use, and one Observer may
// serve any number of Limiters.
//
// Each label set is resolved to its child metric once and cached: an event
// with an already seen label set allocates nothing and takes no lock (a map
// lookup and an atomic add). The cache holds up to 4096 label sets per metric;
// past that events are still counted, only resolved per call.
//
// Observer is also a prometheus.Collector of its metrics, for callers
// that passed a nil Registerer to New and register it themselves (or use
// testutil on it).
type Observer struct {
	requests  *prometheus.CounterVec
	refunds   *prometheus.CounterVec
	issues    *prometheus.CounterVec
	storeErrs *prometheus.CounterVec
	durations *prometheus.HistogramVec
	waits     *prometheus.HistogramVec

	reqCache   cache[requestKey, prometheus.Counter]
	refCache   cache[refundKey, prometheus.Counter]
	issueCache cache[issueKey, prometheus.Counter]
	errCache   cache[storeErrKey, prometheus.Counter]
	durCache   cache[durationKey, prometheus.Observer]
	waitCache  cache[waitKey, prometheus.Observer]

	side storeSide // breaker.go

	slots     *prometheus.GaugeVec // slots.go
	slotCache cache[string, prometheus.Gauge]

	blocks blockSide // blocks.go
}

var (
	_ limit.Observer       = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

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

// outcomes are created together: the first event of a (bucket, handler,
// key_source, plan) also creates its other outcomes at 0, so that rate() and
// increase() see the first limited or degraded request of a series.
// shadow-limited (a Policy.Shadow policy's would-be limits) is not among
// them: only shadow policies produce it, and creating it for every label
// set would cost a fourth series each; its series starts at its first
// event.
var outcomes = [...]limit.Outcome{limit.OutcomeAllowed, limit.OutcomeLimited, limit.OutcomeDegraded}

// New returns an Observer whose metrics are registered on reg.
//
// reg nil: the metrics are collected but not registered anywhere (register
// the Observer itself, or serve it with Handler). When a metric of the same
// name, help and labels is already registered on reg (prometheus.
// AlreadyRegisteredError), typically by an earlier New for another Limiter in
// the same process, New reuses the existing collector, so that every Observer
// on reg counts into the same series. Any other registration error is
// returned, wrapped, after unregistering what this call registered. Option
// errors wrap ErrInvalidOption.
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	cfg := config{buckets: DefaultDurationBuckets()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	o := &Observer{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RequestsTotal,
			Help: "Rate-limit decisions by bucket, route template (handler), outcome (allowed, limited, degraded, shadow-limited), identity source (key_source) and plan (\"\" for an unnamed default plan). An allowed request later refunded is also in quotagate_refunds_total.",
		}, []string{"bucket", "handler", "outcome", "key_source", "plan"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RefundsTotal,
			Help: "Allowed requests whose charge was given back to the bucket, by bucket and reason (later-mount: a later mount limited the request; status: CountStatus did not count its status). Served = allowed - refunded.",
		}, []string{"bucket", "reason"}),
		issues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: IssuesTotal,
			Help: "Requests that met a configuration or input problem (client address, route, plan, a user function that failed), by bucket and kind.",
		}, []string{"bucket", "kind"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: StoreErrorsTotal,
			Help: "Failed rate-limit store calls (errors, timeouts, panics) by bucket and the failure mode applied.",
		}, []string{"bucket", "failure_mode"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    StoreDurationSeconds,
			Help:    "Duration of rate-limit store calls in seconds, failed calls included, by store and operation.",
			Buckets: cfg.buckets,
		}, []string{"store", "op"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    WaitSeconds,
			Help:    "Time requests waited for the slot they reserved (Policy.MaxWait), in seconds, by bucket and result (served: admitted at its slot; cancelled: its context ended first and the slot was given back). The count is the requests that waited.",
			Buckets: WaitBuckets(),
		}, []string{"bucket", "result"}),
		side:   newStoreSide(),
		blocks: newBlockSide(),
		slots:  newSlots(),
	}
	if reg == nil {
		return o, nil
	}
	var done []prometheus.Collector
	var err error
	if o.requests, err = register(reg, RequestsTotal, o.requests, &done); err == nil {
		if o.refunds, err = register(reg, RefundsTotal, o.refunds, &done); err == nil {
			if o.issues, err = register(reg, IssuesTotal, o.issues, &done); err == nil {
				if o.storeErrs, err = register(reg, StoreErrorsTotal, o.storeErrs, &done); err == nil {
					if o.durations, err = register(reg, StoreDurationSeconds, o.durations, &done); err == nil {
						if o.waits, err = register(reg, WaitSeconds, o.waits, &done); err == nil {
							if err = o.side.register(reg, &done); err == nil {
								if o.slots, err = register(reg, SlotsInFlight, o.slots, &done); err == nil {
									err = o.blocks.register(reg, &done)
								}
							}
						}
					}
				}
			}
		}
	}
	if err != nil {
		for _, c := range done {
			reg.Unregister(c)
		}
		return nil, err
	}
	return o, nil
}

// MustNew is New for package-level variables; it panics on error.
func MustNew(reg prometheus.Registerer, opts ...Option) *Observer {
	o, err := New(reg, opts...)
	if err != nil {
		panic(err)
	}
	return o
}

// register registers c (the metric name) on reg, or returns the collector
// already registered in its place; done collects what this call registered.
func register[T prometheus.Collector](reg prometheus.Registerer, name string, c T, done *[]prometheus.Collector) (T, error) {
	err := reg.Register(c)
	if err == nil {
		*done = append(*done, c)
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
		return c, fmt.Errorf("promlimit: %s is already registered by a %T, not by promlimit: %w", name, are.ExistingCollector, err)
	}
	return c, fmt.Errorf("promlimit: registering %s: %w", name, err)
}

// label makes a label value safe to keep and to expose: a copy (the engine's
// strings may be borrowed from a framework's reused buffer) that is valid
// UTF-8 (client_golang rejects anything else).
func label(s string) string {
	return strings.Clone(strings.ToValidUTF8(s, "\uFFFD"))
}

// dropped and droppedObs stand in for a child that could not be resolved
// (impossible with the fixed label counts above; kept so that an event can
// never panic). Neither is registered anywhere.
var (
	dropped    = prometheus.NewCounter(prometheus.CounterOpts{Name: "quotagate_dropped_total", Help: "unused"})
	droppedObs = prometheus.ObserverFunc(func(float64) {})
)

// Decision counts one decision in quotagate_requests_total.
func (o *Observer) Decision(e limit.DecisionEvent) {
	k := requestKey{e.Bucket, e.Handler, e.Outcome, e.KeySource, e.Plan}
	c, ok := o.reqCache.get(k)
	if !ok {
		c = o.resolveRequest(k)
	}
	c.Inc()
	if e.Blocked {
		o.blocks.inc(e.Bucket, e.Plan)
	}
}

func (o *Observer) resolveRequest(k requestKey) prometheus.Counter {
	k = requestKey{label(k.bucket), label(k.handler), limit.Outcome(label(string(k.outcome))), limit.KeySource(label(string(k.source))), label(k.plan)}
	child := func(k requestKey) prometheus.Counter {
		c, err := o.requests.GetMetricWithLabelValues(k.bucket, k.handler, string(k.outcome), string(k.source), k.plan)
		if err != nil {
			return dropped
		}
		return o.reqCache.put(k, c)
	}
	for _, out := range outcomes {
		if out != k.outcome {
			sib := k
			sib.outcome = out
			child(sib)
		}
	}
	return child(k)
}

// Refund counts one given-back charge in quotagate_refunds_total.
func (o *Observer) Refund(bucket, reason string) {
	k := refundKey{bucket, reason}
	c, ok := o.refCache.get(k)
	if !ok {
		k = refundKey{label(bucket), label(reason)}
		var err error
		if c, err = o.refunds.GetMetricWithLabelValues(k.bucket, k.reason); err != nil {
			c = dropped
		} else {
			c = o.refCache.put(k, c)
		}
	}
	c.Inc()
}

// Issue counts one request in quotagate_issues_total.
func (o *Observer) Issue(bucket string, kind limit.Issue) {
	k := issueKey{bucket, kind}
	c, ok := o.issueCache.get(k)
	if !ok {
		k = issueKey{label(bucket), limit.Issue(label(string(kind)))}
		var err error
		if c, err = o.issues.GetMetricWithLabelValues(k.bucket, string(k.kind)); err != nil {
			c = dropped
		} else {
			c = o.issueCache.put(k, c)
		}
	}
	c.Inc()
}

// StoreError counts one failed store call in quotagate_store_errors_total;
// failure_mode is mode.String() (open, local, closed).
func (o *Observer) StoreError(bucket string, mode limit.FailureMode) {
	k := storeErrKey{bucket, mode}
	c, ok := o.errCache.get(k)
	if !ok {
		k.bucket = label(bucket)
		var err error
		if c, err = o.storeErrs.GetMetricWithLabelValues(k.bucket, mode.String()); err != nil {
			c = dropped
		} else {
			c = o.errCache.put(k, c)
		}
	}
	c.Inc()
}

// StoreDuration records one store call in quotagate_store_duration_seconds.
func (o *Observer) StoreDuration(store, op string, d time.Duration) {
	k := durationKey{store, op}
	h, ok := o.durCache.get(k)
	if !ok {
		k = durationKey{label(store), label(op)}
		var err error
		if h, err = o.durations.GetMetricWithLabelValues(k.store, k.op); err != nil {
			h = droppedObs
		} else {
			h = o.durCache.put(k, h)
		}
	}
	h.Observe(d.Seconds())
}

// Wait records one request that waited for its reserved slot in
// quotagate_wait_seconds, result "served" or "cancelled".
func (o *Observer) Wait(bucket string, waited time.Duration, served bool) {
	k := waitKey{bucket, served}
	h, ok := o.waitCache.get(k)
	if !ok {
		k.bucket = label(bucket)
		result := "cancelled"
		if served {
			result = "served"
		}
		var err error
		if h, err = o.waits.GetMetricWithLabelValues(k.bucket, result); err != nil {
			h = droppedObs
		} else {
			h = o.waitCache.put(k, h)
		}
	}
	h.Observe(waited.Seconds())
}

// Describe implements prometheus.Collector: the metrics' descriptors.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.requests.Describe(ch)
	o.refunds.Describe(ch)
	o.issues.Describe(ch)
	o.storeErrs.Describe(ch)
	o.durations.Describe(ch)
	o.waits.Describe(ch)
	o.side.skipped.Describe(ch)
	o.side.open.Describe(ch)
	o.side.opens.Describe(ch)
	o.blocks.blocked.Describe(ch)
	o.slots.Describe(ch)
}

// Collect implements prometheus.Collector: the metrics' series.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.requests.Collect(ch)
	o.refunds.Collect(ch)
	o.issues.Collect(ch)
	o.storeErrs.Collect(ch)
	o.durations.Collect(ch)
	o.waits.Collect(ch)
	o.side.skipped.Collect(ch)
	o.side.open.Collect(ch)
	o.side.opens.Collect(ch)
	o.blocks.blocked.Collect(ch)
	o.slots.Collect(ch)
}

// Handler returns an http.Handler that serves this Observer's metrics
// in the Prometheus exposition formats (promhttp), for a GET /metrics route
// that is not itself rate limited. It serves only quotagate's metrics; to
// serve a whole registry use promhttp.HandlerFor(registry,
// promhttp.HandlerOpts{}). Safe for concurrent use.
func (o *Observer) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(o) // a fresh registry and distinct metrics: cannot fail
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
