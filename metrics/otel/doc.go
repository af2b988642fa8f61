// Package otellimit records quotagate's rate-limit events as OpenTelemetry
// metrics through the OTel metric API (go.opentelemetry.io/otel/metric): the
// same facts, with the same bounded attribute sets, as the Prometheus
// module (promlimit). It implements limit.Observer and guard.Observer:
//
//	obs, err := otellimit.New(meterProvider) // an SDK MeterProvider of yours
//	...
//	l, err := limit.New(store, policy, limit.WithObserver(obs))
//
// The library uses the API only; the application chooses the SDK, the
// readers and the exporters (OTLP, Prometheus, stdout), and never a global
// MeterProvider unless it passes otel.GetMeterProvider() itself.
//
// Instruments (every attribute value comes from configuration or a closed
// set, never from the client identity, the request path or a header):
//
//	quotagate.requests{bucket,handler,outcome,key_source,plan} Int64Counter  {request}
//	quotagate.refunds{bucket,reason}                         Int64Counter    {request}
//	quotagate.blocked_requests{bucket,plan}                  Int64Counter    {request}
//	quotagate.issues{bucket,kind}                            Int64Counter    {request}
//	quotagate.store.errors{bucket,failure_mode}              Int64Counter    {call}
//	quotagate.store.duration{store,op}                       Float64Histogram s
//	quotagate.store.skipped{store,reason}                    Int64Counter    {decision}
//	quotagate.store.breaker.open{store}                      Int64Gauge      1 open, 0 closed
//	quotagate.store.breaker.opens{store}                     Int64Counter    {opening}
//	quotagate.store.evictions{store,reason}                  Int64ObservableCounter {entry} (RegisterEvictions)
//	quotagate.store.may_evict{store,policy}                  Int64ObservableGauge 1 may evict, 0 not (RegisterEvictionPolicy)
//	quotagate.wait{bucket,result}                            Float64Histogram s (Policy.MaxWait)
//	quotagate.concurrency.slots_in_flight{bucket}            Int64UpDownCounter {slot} (limit.Concurrency)
//
// The attributes mean what promlimit's labels mean (see its package
// documentation): bucket the bucket name, handler the router's route
// template ("" when unknown), outcome allowed, limited, degraded or
// shadow-limited, key_source key-func, header, socket, fallback or consume,
// plan the plan that decided, reason later-mount or status (refunds), kind
// a limit.Issue, failure_mode open, local or closed, store the store's
// name, op the operation, result served or cancelled (waits), policy the
// server's maxmemory-policy, reason deny-cache or breaker-open (skipped)
// and expired or live (evictions). The names and units are chosen so that
// the OTel Prometheus exporter's translation (dots to underscores, a unit
// suffix, _total on counters) gives promlimit's metric names and label
// names (TestPrometheusExporterGivesPromlimitsNames in tests/promlimit), and the dashboard
// and alerts of docs/observability.md apply unchanged.
package otellimit
