// Package promlimit exposes quotagate's rate-limit events as Prometheus
// metrics (github.com/prometheus/client_golang). It implements limit.Observer:
//
//	reg := prometheus.NewRegistry()
//	obs, err := promlimit.New(reg)
//	...
//	l, err := limit.New(store, policy, limit.WithObserver(obs))
//	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Metrics (every label value comes from configuration or a closed set, never
// from the client identity, the request path or a header, so the number of
// series does not grow with traffic):
//
//	quotagate_requests_total{bucket,handler,outcome,key_source,plan}  counter
//	quotagate_refunds_total{bucket,reason}                            counter
//	quotagate_blocked_requests_total{bucket,plan}                     counter
//	quotagate_issues_total{bucket,kind}                               counter
//	quotagate_store_errors_total{bucket,failure_mode}                 counter
//	quotagate_store_duration_seconds{store,op}                        histogram
//	quotagate_wait_seconds{bucket,result}                             histogram
//	quotagate_concurrency_slots_in_flight{bucket}                     gauge
//	quotagate_store_evictions_total{store,reason}                     counter (NewEvictionsCollector)
//	quotagate_store_may_evict{store,policy}                           gauge (NewEvictionPolicyCollector)
//	quotagate_store_skipped_total{store,reason}                       counter
//	quotagate_store_breaker_open{store}                               gauge
//	quotagate_store_breaker_opens_total{store}                        counter
//
// bucket is the bucket name: a policy Name when one is set (name policies
// for readable labels), else a Shared policy's signature, or a PerRoute
// policy's route template and signature ("/v1/login 5p60f"). A signature
// spells the policy's numbers, <Limit>p<Window>, the Window in
// seconds (or "<n>ms"), then the algorithm's letter (none for sliding window,
// f for fixed window, g for token bucket), then b<Burst> for a token bucket
// whose Burst differs from Limit: "100p60" is 100 per 60 s, sliding window;
// "5p60f" 5 per 60 s, fixed window; "1p1gb5" 1 per second, token bucket,
// Burst 5. handler is the router's own route spelling ("/v1/notes/{id}",
// "/v1/notes/:id"), "" when no route matched (404, 405), when the mount cannot
// see the route, or for Limiter.Consume; outcome is allowed, limited,
// degraded or shadow-limited (a Policy.Shadow policy would have limited the
// request and admitted it); key_source is key-func, header, socket, fallback
// or consume; plan is the plan that decided (a key of Policy.Plans,
// Policy.DefaultPlan, or "" for an unnamed default plan); reason (refunds)
// is later-mount (a later mount limited the request and this mount gave its
// charge back) or status (Policy.CountStatus did not count the status): a
// refunded request is also counted allowed in quotagate_requests_total, so
// a bucket served allowed minus refunded; quotagate_blocked_requests_total
// counts the requests a block limited (Policy.BlockFor), each also counted
// limited (shadow-limited under Shadow) in quotagate_requests_total; kind
// (issues) is one of the limit.Issue values; failure_mode is open, local or
// closed; store is the store's name (memory, redis, custom) and op the
// operation (take, peek, reset, and acquire or release for a Concurrency
// policy); result is served or cancelled (the waits of Policy.MaxWait);
// quotagate_concurrency_slots_in_flight is the Concurrency slots this
// process's requests hold; policy is the server's maxmemory-policy (see
// NewEvictionPolicyCollector); reason is expired or live for evictions (see
// EvictionCounter), deny-cache (the local deny cache repeated the store's
// own denial) or breaker-open (the store's circuit breaker is open and the
// failure mode decided) for skipped calls.
//
// The library never touches the global registry: the caller passes a
// prometheus.Registerer (or nil to register nothing). See docs/observability.md
// for the dashboard and the alerts.
package promlimit
