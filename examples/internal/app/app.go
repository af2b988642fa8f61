// Package app is what every example server shares: the flags, the store, the
// policies of the example API, the JSON handlers' bodies and the start-up
// line. Each examples/<framework> program only wires these into its router, so
// the servers behave identically and the same black-box checks (make demo)
// run against each.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	otellimit "github.com/quotagate/quotagate/metrics/otel"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
	memstore "github.com/quotagate/quotagate/stores/memory"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Config is the parsed command line shared by every example server.
type Config struct {
	Addr           string
	Redis          string
	TrustedHeader  string
	TrustedHops    int
	TrustedProxies string
	Disclosure     string
	Headers        string
	Shadow         bool
	Otel           bool
	AdminToken     string
	TZ             string // -tz: the zone of GET /v1/daily's calendar day
}

// ParseFlags parses the example servers' flags from os.Args.
func ParseFlags() Config {
	var c Config
	flag.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	flag.StringVar(&c.Redis, "redis", "", "Redis URL (redis://host:port, ?addr= for Cluster, ?master_set= for Sentinel); empty: the in-process memory store")
	flag.StringVar(&c.TrustedHeader, "trusted-header", "", "client-address header set by your proxy (X-Forwarded-For, Forwarded, CF-Connecting-IP, ...); exclusive with -trusted-proxies")
	flag.IntVar(&c.TrustedHops, "trusted-hops", 0, "with -trusted-header X-Forwarded-For or Forwarded (required for those): how many of your proxies append to it")
	flag.StringVar(&c.TrustedProxies, "trusted-proxies", "", "comma-separated CIDRs of trusted proxies (walk X-Forwarded-For right to left); exclusive with -trusted-header")
	flag.StringVar(&c.Disclosure, "disclosure", "retry-after", "none|retry-after|on-limit|always")
	flag.StringVar(&c.Headers, "headers", "ietf", "comma-separated header styles: ietf,triplet,legacy")
	flag.BoolVar(&c.Shadow, "shadow", false, "every limiter in shadow mode: decide and count, never limit (no 429; /metrics shows outcome=\"shadow-limited\")")
	flag.StringVar(&c.AdminToken, "admin-token", "", "serve GET and DELETE "+AdminPrefix+"{identity} (the Peek and the Reset of the global, login and otp limiters) to callers sending Authorization: Bearer TOKEN; empty: no admin routes")
	flag.BoolVar(&c.Otel, "otel", false, "record quotagate's metrics through the OpenTelemetry SDK (otellimit), printed as JSON by the stdout exporter on stderr every 10 s, instead of on GET /metrics")
	flag.StringVar(&c.TZ, "tz", "UTC", "time zone of GET /v1/daily's calendar day (an IANA name: America/New_York, Europe/Berlin, ...)")
	flag.Parse()
	if flag.NArg() > 0 {
		fatal(fmt.Errorf("unexpected argument %q: every setting is a flag (run with -h to list them)", flag.Arg(0)))
	}
	return c
}

// Limiters are the example API's policies.
type Limiters struct {
	// Global: Shared sliding window, 100 per 60 s, on every request but
	// /health and /metrics (its SkipPaths), those no route matches (404,
	// 405) included, so that a scanner is limited like any client. CORS
	// preflights are not limited (the engine's default).
	Global *limit.Limiter
	// Login: fixed window, 5 per 60 s, on POST /v1/login (named "login":
	// one bucket, which the admin routes can look up and reset).
	Login *limit.Limiter
	// Search: PerRoute token bucket, 1 per second with a burst of 5, on
	// GET /v1/search; ?expensive=1 costs 3.
	Search *limit.Limiter
	// Slow: at most SlowLimit requests of one client address in flight at
	// once on GET /v1/slow (Concurrency "slow"), across every server on
	// the same Redis; the others get 429 at once.
	Slow *limit.Limiter
	// Feed: token bucket "feed", 5 per second, burst 1, on GET /v1/feed:
	// a request the bucket cannot take now waits up to 2 s for its slot
	// (Policy.MaxWait) instead of a 429; with -shadow it does not wait.
	Feed *limit.Limiter
	// Reports: two sliding-window quotas at once, 2 per 10 s and 5 per
	// 60 s per client, on GET /v1/reports: a request is admitted only when
	// both admit it.
	Reports *limit.Limiter
	// Export: keyed by the X-API-Key header (by client address without
	// one); keys starting with "pro-" are on plan "pro", 20 per 60 s, every
	// other identity 5 per 60 s (sliding window), on GET /v1/export.
	Export *limit.Limiter
	// Signin: PerRoute fixed window, 3 failed attempts per 60 s, on
	// POST /v1/signin: it counts only the answers >= 400 (CountStatus), so
	// successful sign-ins are free, and once 3 have failed the next attempt
	// gets 429 whatever its password.
	Signin *limit.Limiter
	// StoreName describes the store for the start-up line.
	StoreName string
	// RedisStatus says whether Redis answered PING at start ("" with the
	// memory store); printed before the start-up line.
	RedisStatus string
	// Metrics serves the limiters' Prometheus metrics (quotagate_*) for
	// GET /metrics, which every example mounts outside the limiter.
	Metrics http.Handler
	// Admin serves GET and DELETE AdminPrefix+"{identity}" (the Peek and
	// the Reset of Global, Login and OTP) to callers with the -admin-token; nil
	// without the flag, and then the examples mount no admin route.
	Admin  http.Handler
	shadow bool
	// flush, with -otel, exports the last measurements at shutdown.
	flush func(context.Context) error
	// OTP: fixed window "otp", 3 failed attempts per 5 s per client, on
	// POST /v1/otp (CountStatus: a right code is free); the attempt that
	// finds them spent blocks the client for 8 s, a repeat offence 16 s
	// (BlockFor, BlockMax), and a blocked client gets 429 even with the
	// right code.
	OTP *limit.Limiter
	// Daily: keyed by the X-API-Key header (by client address without
	// one), 2 per second and 20 per calendar day in the zone of -tz
	// (FixedWindow: the day begins at local midnight), on GET /v1/daily.
	Daily *limit.Limiter
	// DailyZone is -tz's zone name ("UTC" by default).
	DailyZone string
}

// APIKey is the export policy's KeyFunc: the X-API-Key header, or "" (the
// identity falls through to the client address). It reads limit.Request's
// header, which every adapter fills, so one function serves all five.
func APIKey(r limit.Request) (string, error) {
	if r.Header == nil {
		return "", nil
	}
	if v := r.Header.Values("X-Api-Key"); len(v) > 0 {
		return v[0], nil
	}
	return "", nil
}

// PlanOf is the export policy's Plan: "pro" for API keys starting with
// "pro-", else "free", the default plan's name (Policy.DefaultPlan). A real
// service would look the key's tier up; returning constant strings
// allocates nothing.
func PlanOf(r limit.Request) (string, error) {
	if k, _ := APIKey(r); strings.HasPrefix(k, "pro-") {
		return "pro", nil
	}
	return "free", nil
}

// KeyPrefix is the examples' namespace in the store: a service's name, so
// that other services on the same Redis keep their own allowances (New
// refuses the default prefix on a shared store).
const KeyPrefix = "notes-example"

// Env is what every example server's policies stand on, from the flags: the
// store (memory, or Redis with the memory store as FailLocal's fallback),
// the Limiter options (trust, observer, logger) and the policy fields the
// flags set (Fill).
type Env struct {
	Store   limitstore.Store
	Options []limit.Option
	// StoreName describes the store for the start-up line.
	StoreName string
	// RedisStatus says whether Redis answered PING at start ("" with the
	// memory store).
	RedisStatus string
	// Metrics serves the limiters' Prometheus metrics (quotagate_*).
	Metrics http.Handler
	// Flush, with -otel, exports the last measurements at shutdown; nil
	// without -otel.
	Flush      func(context.Context) error
	disclosure limit.Disclosure
	style      limit.HeaderStyle
	failure    limit.FailureMode
	shadow     bool
}

// NewEnv creates the store, the observer and the options of c; prefix is
// the service's key prefix (limit.WithKeyPrefix).
func NewEnv(c Config, prefix string) (*Env, error) {
	trust, err := TrustOptions(c)
	if err != nil {
		return nil, err
	}
	disclosure, err := ParseDisclosure(c.Disclosure)
	if err != nil {
		return nil, err
	}
	style, err := ParseHeaderStyle(c.Headers)
	if err != nil {
		return nil, err
	}
	// The memory store is the embedded default; with -redis it is the
	// per-process store FailLocal falls back on while Redis is failing.
	local, err := memstore.New()
	if err != nil {
		return nil, err
	}
	// One registry per server, never the global one: the limiters share
	// the observer (With keeps the options), so GET /metrics shows every
	// bucket; the Redis store reports its protections to it too.
	reg := prometheus.NewRegistry()
	var obs limit.Observer
	var flush func(context.Context) error
	if c.Otel {
		if obs, flush, err = otelObserver(); err != nil {
			return nil, err
		}
	} else if obs, err = promlimit.New(reg); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	e := &Env{Store: local, StoreName: "memory (embedded default)", disclosure: disclosure, style: style,
		failure: limit.FailOpen, shadow: c.Shadow, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	if c.Redis != "" {
		rs, err := redisstore.NewFromURL(c.Redis, redisstore.WithObserver(obs), redisstore.WithLogger(logger))
		if err != nil {
			return nil, fmt.Errorf("-redis: %w", err)
		}
		e.Store, e.StoreName, e.failure = rs, "redis (fail-local to memory while Redis is down)", limit.FailLocal
		trust = append(trust, limit.WithLocalStore(local))
		e.RedisStatus = PingRedis(rs, c.Redis)
	}
	e.Options = append(trust, limit.WithKeyPrefix(prefix), limit.WithObserver(obs), limit.WithLogger(logger))
	e.Flush = flush
	return e, nil
}

// Fill sets the fields the flags decide on p: Disclosure, HeaderStyle,
// FailureMode and Shadow.
func (e *Env) Fill(p limit.Policy) limit.Policy {
	p.Disclosure, p.HeaderStyle, p.FailureMode, p.Shadow = e.disclosure, e.style, e.failure, e.shadow
	return p
}

// Build creates the store and the limiters from c (-shadow puts every one
// in shadow mode). searchCost prices a
// search request (the framework's typed helper reading ?expensive=1).
func Build(c Config, searchCost func(limit.Request) int64) (*Limiters, error) {
	e, err := NewEnv(c, KeyPrefix)
	if err != nil {
		return nil, err
	}
	store, storeName, redisStatus := e.Store, e.StoreName, e.RedisStatus
	disclosure, style, failure := e.disclosure, e.style, e.failure
	global, err := limit.New(store, limit.Policy{
		Limit: 100, Window: 60 * time.Second, Algorithm: limit.SlidingWindow,
		Disclosure: disclosure, HeaderStyle: style, FailureMode: failure, Shadow: c.Shadow,
		SkipPaths: []string{"/health", "/metrics"},
	}, e.Options...)
	if err != nil {
		return nil, fmt.Errorf("global policy: %w", err)
	}
	login, err := global.With(limit.Policy{
		Name: "login", Algorithm: limit.FixedWindow, Limit: 5, Window: 60 * time.Second,
		Disclosure: disclosure, HeaderStyle: style, FailureMode: failure, Shadow: c.Shadow,
	})
	if err != nil {
		return nil, fmt.Errorf("login policy: %w", err)
	}
	search, err := global.With(limit.Policy{
		Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 5, Cost: 1,
		CostFunc: searchCost, Disclosure: disclosure, HeaderStyle: style, FailureMode: failure, Shadow: c.Shadow,
	})
	if err != nil {
		return nil, fmt.Errorf("search policy: %w", err)
	}
	feed, err := global.With(feedPolicy(c, disclosure, style, failure))
	if err != nil {
		return nil, fmt.Errorf("feed policy: %w", err)
	}
	reports, err := global.With(limit.Policy{
		Name: "reports", Shadow: c.Shadow,
		Quotas:     []limit.Rate{{Limit: 2, Window: 10 * time.Second}, {Limit: 5, Window: 60 * time.Second}},
		Disclosure: disclosure, HeaderStyle: style, FailureMode: failure,
	})
	if err != nil {
		return nil, fmt.Errorf("reports policy: %w", err)
	}
	export, err := global.With(limit.Policy{
		Name: "export", Limit: 5, Window: 60 * time.Second, Shadow: c.Shadow,
		KeyFunc: APIKey, Plan: PlanOf, DefaultPlan: "free",
		Plans:      map[string][]limit.Rate{"pro": {{Limit: 20, Window: 60 * time.Second}}},
		Disclosure: disclosure, HeaderStyle: style, FailureMode: failure,
	})
	if err != nil {
		return nil, fmt.Errorf("export policy: %w", err)
	}
	signin, err := global.With(limit.Policy{
		Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 3, Window: 60 * time.Second, Shadow: c.Shadow,
		CountStatus: func(status int) bool { return status >= 400 },
		Disclosure:  disclosure, HeaderStyle: style, FailureMode: failure,
	})
	if err != nil {
		return nil, fmt.Errorf("signin policy: %w", err)
	}
	otp, err := global.With(otpPolicy(c, disclosure, style, failure))
	if err != nil {
		return nil, fmt.Errorf("otp policy: %w", err)
	}
	daily, zone, err := dailyLimiter(global, c, disclosure, style, failure)
	if err != nil {
		return nil, err
	}
	slow, err := global.With(e.Fill(limit.Policy{Name: "slow", Algorithm: limit.Concurrency, Limit: SlowLimit}))
	if err != nil {
		return nil, fmt.Errorf("slow policy: %w", err)
	}
	l := &Limiters{
		Slow: slow, Global: global, Login: login, Search: search, Feed: feed, Reports: reports, Export: export, Signin: signin, OTP: otp,
		Daily: daily, DailyZone: zone,
		StoreName: storeName, RedisStatus: redisStatus, shadow: c.Shadow, flush: e.Flush,
		Metrics: e.Metrics,
	}
	if c.AdminToken != "" {
		l.Admin = &adminHandler{token: c.AdminToken, names: []string{"global", "login", "otp"}, limiters: []*limit.Limiter{global, login, otp}}
	}
	return l, nil
}

// FeedMaxWait is how long a GET /v1/feed request waits for its slot.
const FeedMaxWait = 2 * time.Second

// feedPolicy is the feed's policy: 5 per second, burst 1, and requests
// wait up to FeedMaxWait for a slot (not in shadow mode, which never
// delays a request).
func feedPolicy(c Config, d limit.Disclosure, s limit.HeaderStyle, f limit.FailureMode) limit.Policy {
	p := limit.Policy{
		Name: "feed", Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 1, MaxWait: FeedMaxWait,
		Disclosure: d, HeaderStyle: s, FailureMode: f,
	}
	if c.Shadow {
		p.MaxWait, p.Shadow = 0, true
	}
	return p
}

// pingTimeout bounds the start-up PING: longer than the store's dial timeout
// (redisstore.DefaultDialTimeout), so a slow first connection still counts.
const pingTimeout = 2 * time.Second

// PingRedis sends PING through the store and returns the line that says
// whether Redis answered. The server serves either way: while Redis does
// not answer, decisions follow the policies' FailureMode (FailLocal:
// per-process limits from the memory store) and the store keeps
// reconnecting in the background.
func PingRedis(s *redisstore.Store, rawURL string) string {
	where := rawURL
	if u, err := url.Parse(rawURL); err == nil {
		where = u.Redacted() // no password on the terminal
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	t0 := time.Now()
	if err := s.Ping(ctx); err != nil {
		return fmt.Sprintf("Redis at %s did NOT answer PING: %v; serving anyway, with per-process limits (FailLocal) until it answers", where, err)
	}
	return fmt.Sprintf("Redis at %s answered PING in %v", where, time.Since(t0).Round(10*time.Microsecond))
}

// TrustOptions maps -trusted-header/-trusted-hops and -trusted-proxies to the
// engine's trust options (none when both are empty: no header is read).
// -trusted-proxies takes comma-separated CIDRs or bare addresses (a bare
// address is its own /32 or /128). Contradictions are errors that name the
// valid combinations: -trusted-header with -trusted-proxies, -trusted-hops
// without -trusted-header, and -trusted-header X-Forwarded-For or Forwarded
// without -trusted-hops (how many proxies append to a list is a trust
// decision with no safe default; single-value headers take 1).
func TrustOptions(c Config) ([]limit.Option, error) {
	header, proxies := strings.TrimSpace(c.TrustedHeader), strings.TrimSpace(c.TrustedProxies)
	switch {
	case header != "" && proxies != "":
		return nil, errors.New("-trusted-header and -trusted-proxies are exclusive: use -trusted-header NAME " +
			"(with -trusted-hops N for X-Forwarded-For or Forwarded) when your proxies set a header, " +
			"or -trusted-proxies CIDRs to walk X-Forwarded-For from the proxies you list")
	case header == "" && c.TrustedHops != 0:
		return nil, fmt.Errorf("-trusted-hops %d without -trusted-header: give the header your proxies append to "+
			"(X-Forwarded-For or Forwarded)", c.TrustedHops)
	}
	var opts []limit.Option
	if header != "" {
		hops := c.TrustedHops
		if hops == 0 {
			if canon := textproto.CanonicalMIMEHeaderKey(header); canon == "X-Forwarded-For" || canon == "Forwarded" {
				return nil, fmt.Errorf("-trusted-header %s needs -trusted-hops N: how many of your proxies append to it "+
					"(1 for a single proxy, 2 for a CDN in front of a load balancer)", canon)
			}
			hops = 1 // a single-value header: the only valid value
		}
		opts = append(opts, limit.WithTrustedHeader(header, hops))
	}
	if proxies != "" {
		var ps []netip.Prefix
		for _, part := range strings.Split(c.TrustedProxies, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			p, err := netip.ParsePrefix(part)
			if err != nil {
				a, aerr := netip.ParseAddr(part)
				if aerr != nil {
					return nil, fmt.Errorf("-trusted-proxies %q: %w", part, err)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			ps = append(ps, p)
		}
		opts = append(opts, limit.WithTrustedProxies(ps...))
	}
	return opts, nil
}

// ParseDisclosure maps the -disclosure flag to a limit.Disclosure.
func ParseDisclosure(s string) (limit.Disclosure, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "none":
		return limit.DiscloseNone, nil
	case "retry-after", "":
		return limit.DiscloseRetryAfter, nil
	case "on-limit":
		return limit.DiscloseOnLimit, nil
	case "always":
		return limit.DiscloseAlways, nil
	}
	return 0, fmt.Errorf("-disclosure %q: want none, retry-after, on-limit or always", s)
}

// ParseHeaderStyle maps the -headers flag to a limit.HeaderStyle.
func ParseHeaderStyle(s string) (limit.HeaderStyle, error) {
	var st limit.HeaderStyle
	for _, part := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(part)) {
		case "ietf":
			st |= limit.HeadersIETF
		case "triplet":
			st |= limit.HeadersTriplet
		case "legacy":
			st |= limit.HeadersLegacy
		case "":
		default:
			return 0, fmt.Errorf("-headers %q: want a comma-separated list of ietf, triplet, legacy", s)
		}
	}
	if st == 0 {
		return 0, fmt.Errorf("-headers %q: want at least one of ietf, triplet, legacy (-disclosure none sends no header)", s)
	}
	return st, nil
}

// JSON bodies of the example API.
const (
	HealthBody  = `{"status":"ok"}`
	LoginBody   = `{"ok":true}`
	SearchBody  = `{"results":[]}`
	FeedBody    = `{"items":[]}`
	ReportsBody = `{"reports":[]}`
	ExportBody  = `{"export":"ready"}`
	DailyBody   = `{"daily":"ok"}`
)

// NoteBody is the body of GET /v1/notes/{id}.
func NoteBody(id string) string {
	return fmt.Sprintf(`{"id":%q,"text":"a note"}`, id)
}

// Password is the password POST /v1/signin accepts, in the X-Password
// request header.
const Password = "open-sesame"

// SigninStatus is the answer of POST /v1/signin for the X-Password header's
// value: 204 No Content for Password, 401 Unauthorized otherwise.
func SigninStatus(password string) int {
	if password == Password {
		return http.StatusNoContent
	}
	return http.StatusUnauthorized
}

// Describe is the start-up line's policy part.
func (l *Limiters) Describe() string {
	d := "policies: global " + limit.SlidingWindow.String() + " 100/60s shared; " +
		"POST /v1/login fixed-window 5/60s (bucket login); " +
		"GET /v1/search token-bucket 1/s burst 5 per route (?expensive=1 costs 3); " +
		"GET /v1/feed token-bucket 5/s burst 1, waits up to 2s for a slot; " +
		"GET /v1/slow?ms=N concurrency: 2 in flight per client; " +
		"GET /v1/reports sliding-window 2/10s and 5/60s; " +
		"GET /v1/export sliding-window per X-API-Key, pro- keys 20/60s, others 5/60s; " +
		"POST /v1/signin fixed-window 3 failed attempts/60s per route (successes free); " +
		"POST /v1/otp fixed-window 3 failed attempts/5s, then blocked 8s, a repeat 16s (bucket otp); " +
		"GET /v1/daily fixed-window per X-API-Key, 2/s and 20 per calendar day in " + l.DailyZone + "; " +
		"a request a per-route limit answers 429 charges the global limit nothing"
	if l.Admin != nil {
		d += "; admin routes GET|DELETE " + AdminPrefix + "{identity} (Bearer token)"
	}
	if l.shadow {
		d += "; SHADOW MODE: nothing is limited, would-be limits are counted (outcome=shadow-limited)"
	}
	return d
}

// Serve listens on c.Addr, prints the start-up line (which make demo reads:
// "listening on http://ADDR") and serves h until SIGINT or SIGTERM, then shuts
// down gracefully.
func Serve(framework string, c Config, l *Limiters, h http.Handler) error {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	return ServeListener(framework, ln, l, func(ctx context.Context, ln net.Listener) error {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
}

// ServeListener prints the start-up line for ln and runs serve(ctx, ln),
// for frameworks that run their own server (fiber): ctx is done on SIGINT or
// SIGTERM, caught from before the start-up line on (a signal sent as soon as
// the line is read shuts the server down gracefully rather than killing it),
// and serve then shuts its server down and returns. With -otel the last
// measurements are exported after serve returns.
func ServeListener(framework string, ln net.Listener, l *Limiters, serve func(ctx context.Context, ln net.Listener) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if l.RedisStatus != "" {
		fmt.Fprintf(os.Stdout, "quotagate example (%s): %s\n", framework, l.RedisStatus)
	}
	fmt.Fprintf(os.Stdout, "quotagate example (%s) listening on http://%s store=%s; %s\n",
		framework, ln.Addr(), l.StoreName, l.Describe())
	err := serve(ctx, ln)
	if l.flush != nil {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.flush(fctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Main runs an example server's main: parse, build, wire, serve; errors exit 2.
func Main(framework string, searchCost func(limit.Request) int64, wire func(*Limiters) http.Handler) {
	c := ParseFlags()
	l, err := Build(c, searchCost)
	if err != nil {
		fatal(err)
	}
	if err := Serve(framework, c, l, wire(l)); err != nil {
		fatal(err)
	}
}

// otelObserver is the -otel observer: an OTel SDK MeterProvider whose
// periodic reader hands the measurements to the stdout exporter (JSON on
// stderr, so that stdout keeps only the start-up line) every 10 s; flush
// shuts the provider down, exporting what is left.
func otelObserver() (limit.Observer, func(context.Context) error, error) {
	exp, err := stdoutmetric.New(stdoutmetric.WithWriter(os.Stderr))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(10*time.Second))))
	obs, err := otellimit.New(mp)
	if err != nil {
		return nil, nil, err
	}
	return obs, mp.Shutdown, nil
}

func fatal(err error) {
	io.WriteString(os.Stderr, "error: "+err.Error()+"\n")
	os.Exit(2)
}
