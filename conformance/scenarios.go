package conformance

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// Scenario is one named behaviour every adapter x store must show. It is
// data: the policies, the app layout, and the requests with their expected
// responses.
type Scenario struct {
	// Name names the subtest: a number and what the scenario shows
	// ("21-unmatched-requests-count-against-the-global-mount").
	Name string
	// Policies by name; App mounts refer to these names.
	Policies map[string]limit.Policy
	// Options are passed to every limiter of the scenario.
	Options []limit.Option
	// Failure wraps the store in a Flaky store that steps can break, behind
	// a guard.New wrapper (timeout, breaker; no deny cache) with Timeout.
	Failure bool
	// Timeout is the Failure wrapper's timeout; 0: 10 s. A scenario whose
	// last step hangs the store sets it short enough to keep the run quick
	// and long enough that a healthy store's answer on a loaded machine
	// (-race, two cores, every module testing at once) never exceeds it.
	Timeout time.Duration
	// App is the router the harness serves: which routes, and which
	// policies are mounted where.
	App AppSpec
	// Steps are the requests, in order, each with its expected response.
	Steps []Step
	// Concurrent, when set, runs after Steps: many clients at once.
	Concurrent *Concurrent
	// RealTime keeps the store's clock up with real time: before each step
	// it moves by the step's Advance, or further, so that it is never
	// behind the real time since an earlier step (limittest.RealTimeFloor).
	// A scenario whose requests wait for their slots (Policy.MaxWait) sets
	// it: they wait in real time, a Redis row's keys expire in real time,
	// and a clock that stood still meanwhile found a key gone whose state
	// the next step still needed. A step's Want.Delay is then counted from
	// the instant its Advances put it at: a clock moved 30 ms further
	// leaves 30 ms less to wait.
	RealTime bool
	// Events checks the engine's decision events against the responses.
	Events bool
	// CountOnLimited wraps every policy's OnLimited hook (after any the
	// policy has) with a counter that must equal the number of 429s.
	CountOnLimited bool
	// TypedKeyHeader, when set, gives every policy the adapter's typed key
	// function (Harness.KeyFunc) reading this request header.
	TypedKeyHeader string
	// TypedCostQuery, when set, gives every policy the adapter's typed cost
	// function (Harness.CostFunc) reading this query parameter.
	TypedCostQuery string
	// TypedPlanHeader, when set, gives every policy the adapter's typed
	// plan function (Harness.PlanFunc) reading this request header.
	TypedPlanHeader string
}

// AppSpec lays out the routes and mounts by policy name.
type AppSpec struct {
	// Global names the policies mounted on the whole router, in order
	// (App.Global).
	Global []string
	// Groups are the route groups with their own mounts (App.Groups).
	Groups []GroupSpec
	// Routes are the routes outside any group (App.Routes).
	Routes []RouteSpec
}

// GroupSpec is a Group by policy name.
type GroupSpec struct {
	// Prefix is the group's path prefix ("/v1"); see Group.Prefix.
	Prefix string
	// Mounts names the policies mounted on the group, in order.
	Mounts []string
	// Routes are the group's routes, with full paths.
	Routes []RouteSpec
}

// RouteSpec is a Route by policy name.
type RouteSpec struct {
	// Method is the route's HTTP method.
	Method string
	// Path is the full route template in {param} form ("/v1/notes/{id}").
	Path string
	// Mounts names the policies mounted on this route alone, in order.
	Mounts []string
	// Status is what the handler answers (0: 200).
	Status int
	// Body is what the handler writes ("" for none).
	Body string
	// Sleep is how long the handler runs before it answers (0: at once).
	Sleep time.Duration
}

// Step is one or more identical requests.
type Step struct {
	// Client is the loopback address the request dials from ("127.0.0.2"),
	// or "unix" for a connection over a Unix socket (no client address).
	Client string
	// Method is the request method, any token (an unknown one like "FOO"
	// included).
	Method string
	// Path is the request target: path and query, sent as is
	// ("/v1/notes/1?x=1", "/v1//login").
	Path string
	// Header lines to send; several lines of one field are separate entries.
	Header [][2]string
	// Advance moves the fake clock before the request(s).
	Advance time.Duration
	// Store, when set, switches the Flaky store first: "fail", "hang", "ok".
	Store string
	// Times sends the request this many times (default 1), each expecting Want.
	Times int
	// Want is the response every request of the step must get.
	Want Want
	// Admin, when set, makes the step a call of Limiter.Peek or Reset
	// instead of a request (Client, Method, Path, Times and Want unused).
	Admin *Admin
}

// Admin is a step that looks up or resets an identity directly on a
// scenario's Limiter, with the identity as the adapter's requests key it
// (the client address the adapter passed as the socket peer).
type Admin struct {
	// Policy names the scenario policy whose Limiter is asked.
	Policy string
	// Identity is the identity given to Peek or Reset.
	Identity string
	// Reset resets Identity; otherwise the step Peeks it.
	Reset bool
	// Allowed and Remaining are the Peek's expected Decision fields, and
	// Identity() must be WantIdentity (when not "").
	Allowed      bool
	Remaining    int64
	WantIdentity string
	// Blocked is the Peek's expected Decision.Blocked (Policy.BlockFor);
	// RetryAfter, when not 0, its RetryAfter exactly.
	Blocked    bool
	RetryAfter time.Duration
}

// Want is the expected response.
type Want struct {
	// Status is the exact status; 0 leaves it unchecked.
	Status int
	// NotLimited requires a response the limiter did not write: any status
	// but 429 and 503, with no Retry-After. It is for requests whose answer
	// is the router's own and differs between routers (a CORS preflight to
	// a path without an OPTIONS route: 404, 405, or echo's automatic 204).
	NotLimited bool
	// Header values that must match exactly; the value "-" means absent.
	Header map[string]string
	// Body, when not "", must match exactly.
	Body string
	// NoBody requires an empty body.
	NoBody bool
	// Handler is "ran", "not-run" or "" (unchecked).
	Handler string
	// Delay, when set, is the least time the response may take: a
	// request that waits for its slot (Policy.MaxWait) is answered,
	// and its handler run, only then.
	Delay time.Duration
	// Skipped marks a request the limiter skips: it must produce no
	// decision event (checked by scenarios with Events).
	Skipped bool
}

// Concurrent sends Clients requests at once from one client address and
// expects exactly Allowed of them to be admitted.
type Concurrent struct {
	// Client is the loopback address every request dials from.
	Client string
	// Path is the GET request's path.
	Path string
	// Clients is how many requests are sent at once.
	Clients int
	// Allowed is exactly how many must be admitted (200); the rest must
	// be 429.
	Allowed int
}

// epoch is the fake clock's start: a multiple of every window used below, so
// that aligned windows start at the first step.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	problem429  = `{"type":"about:blank","title":"Too Many Requests","status":429}`
	problemJSON = "application/problem+json"
	ok          = 200
	limited     = 429

	// failTimeout is the store timeout of the scenarios that end on a
	// hanging store (see Scenario.Timeout).
	failTimeout = 500 * time.Millisecond
)

func get(client, path string, want int) Step {
	return Step{Client: client, Method: "GET", Path: path, Want: Want{Status: want}}
}

func times(s Step, n int) Step { s.Times = n; return s }

// feedStep is a GET /v1/feed of scenario 08d, served after a wait of delay
// with the fields of any admitted request.
func feedStep(delay time.Duration) Step {
	return Step{Client: "127.0.0.2", Method: "GET", Path: "/v1/feed", Want: Want{Status: ok, Handler: "ran", Delay: delay,
		Header: map[string]string{"RateLimit-Policy": `"feed";q=5;w=1`, "RateLimit": `"feed";r=0;t=1`, "Retry-After": "-"}}}
}

// preflight is a CORS preflight request (Fetch standard): OPTIONS with
// Origin and Access-Control-Request-Method.
func preflight(client, path string, want Want) Step {
	return Step{Client: client, Method: "OPTIONS", Path: path, Want: want,
		Header: [][2]string{{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "GET"}}}
}

func after(d time.Duration, s Step) Step { s.Advance = d; return s }

func fixed(limitN int64, window time.Duration) limit.Policy {
	return limit.Policy{Algorithm: limit.FixedWindow, Limit: limitN, Window: window, AlignWindows: true}
}

// costFromHeader prices a request by its X-Cost header (default 1): a
// framework-neutral CostFunc, since every adapter passes header access.
func costFromHeader(r limit.Request) int64 {
	if r.Header == nil {
		return 0
	}
	for _, v := range r.Header.Values("X-Cost") {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return 0
}

// apiKey is a framework-neutral KeyFunc: the X-Api-Key header.
func apiKey(r limit.Request) (string, error) {
	if r.Header == nil {
		return "", nil
	}
	if v := r.Header.Values("X-Api-Key"); len(v) > 0 {
		return v[0], nil
	}
	return "", nil
}

// headerIs returns a Skip predicate: true when the request carries name: value.
func headerIs(name, value string) func(limit.Request) bool {
	return func(r limit.Request) bool {
		if r.Header == nil {
			return false
		}
		for _, v := range r.Header.Values(name) {
			if v == value {
				return true
			}
		}
		return false
	}
}

// Scenarios is the shared list. Adapters run all of it against every store.
func Scenarios() []Scenario {
	return []Scenario{
		{
			Name:     "01-per-peer-isolation",
			Policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("127.0.0.2", "/a", ok), 2),
				get("127.0.0.2", "/a", limited),
				times(get("127.0.0.3", "/a", ok), 2),
				get("127.0.0.3", "/a", limited),
			},
		},
		{
			Name: "02-per-route-buckets-from-templates",
			Policies: map[string]limit.Policy{"r": {Scope: limit.PerRoute, Algorithm: limit.FixedWindow,
				Limit: 2, Window: time.Minute, AlignWindows: true}},
			App: AppSpec{Routes: []RouteSpec{
				{Method: "GET", Path: "/v1/notes/{id}", Mounts: []string{"r"}},
				{Method: "GET", Path: "/v1/other", Mounts: []string{"r"}},
			}},
			Steps: []Step{
				get("127.0.0.2", "/v1/notes/1", ok),
				get("127.0.0.2", "/v1/notes/2", ok),
				get("127.0.0.2", "/v1/notes/3", limited),
				get("127.0.0.2", "/v1/other", ok),
			},
		},
		{
			Name: "03-head-and-get-share-a-bucket",
			Policies: map[string]limit.Policy{"r": {Scope: limit.PerRoute, Algorithm: limit.FixedWindow,
				Limit: 2, Window: time.Minute, AlignWindows: true}},
			App: AppSpec{Routes: []RouteSpec{
				{Method: "GET", Path: "/v1/notes/{id}", Mounts: []string{"r"}},
				{Method: "HEAD", Path: "/v1/notes/{id}", Mounts: []string{"r"}},
			}},
			Steps: []Step{
				get("127.0.0.2", "/v1/notes/1", ok),
				{Client: "127.0.0.2", Method: "HEAD", Path: "/v1/notes/2", Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "HEAD", Path: "/v1/notes/1", Want: Want{Status: limited}},
				get("127.0.0.2", "/v1/notes/1", limited),
			},
		},
		{
			// Stacked mounts: an admitted request counts once in
			// each mount; a request the per-route mount limits charges no
			// mount (the global mount gives its charge back).
			Name:     "04-a-limited-request-charges-no-mount",
			Policies: map[string]limit.Policy{"g": fixed(3, time.Minute), "login": {Name: "login", Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{
				{Method: "POST", Path: "/login", Mounts: []string{"login"}},
				{Method: "GET", Path: "/a"},
			}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: ok}}, 2),
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: limited, Handler: "not-run"}}, 3),
				// the global limit counted the two admitted logins only
				get("127.0.0.2", "/a", ok),
				get("127.0.0.2", "/a", limited),
			},
		},
		{
			Name:     "05-named-bucket-shared-by-two-routes",
			Policies: map[string]limit.Policy{"n": {Name: "search-quota", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, AlignWindows: true}},
			App: AppSpec{Routes: []RouteSpec{
				{Method: "GET", Path: "/search", Mounts: []string{"n"}},
				{Method: "GET", Path: "/v2/search", Mounts: []string{"n"}},
			}},
			Steps: []Step{
				get("127.0.0.2", "/search", ok),
				times(get("127.0.0.2", "/v2/search", ok), 2),
				get("127.0.0.2", "/search", limited),
			},
		},
		{
			Name: "06-skip-list-and-predicate",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true,
				SkipPaths: []string{"/health"}, Skip: headerIs("X-Internal", "1")}},
			Events: true,
			App:    AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/health"}, {Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/health", Want: Want{Status: ok, Handler: "ran", Skipped: true}}, 3),
				get("127.0.0.2", "/a", ok),
				get("127.0.0.2", "/a", limited),
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Internal", "1"}}, Want: Want{Status: ok, Handler: "ran", Skipped: true}}, 2),
				get("127.0.0.2", "/a", limited),
			},
		},
		{
			Name:     "07-handler-not-run-on-denial-status-kept-when-allowed",
			Policies: map[string]limit.Policy{"g": fixed(1, time.Minute)},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{
				{Method: "POST", Path: "/items", Status: 201, Body: "created"},
			}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "POST", Path: "/items", Want: Want{Status: 201, Body: "created", Handler: "ran"}},
				{Client: "127.0.0.2", Method: "POST", Path: "/items", Want: Want{Status: limited, Handler: "not-run"}},
			},
		},
		{
			Name:     "08a-fixed-window-timeline",
			Policies: map[string]limit.Policy{"g": fixed(3, 10*time.Second)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("127.0.0.2", "/a", ok), 3),
				get("127.0.0.2", "/a", limited),
				after(9999*time.Millisecond, get("127.0.0.2", "/a", limited)),
				after(time.Millisecond, times(get("127.0.0.2", "/a", ok), 3)), // exactly at the boundary
				get("127.0.0.2", "/a", limited),
			},
		},
		{
			Name: "08b-sliding-window-timeline",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.SlidingWindow, Limit: 4,
				Window: 10 * time.Second, AlignWindows: true}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("127.0.0.2", "/a", ok), 4),
				get("127.0.0.2", "/a", limited),
				// next window, elapsed 0: the previous 4 still weigh 4
				after(10*time.Second, get("127.0.0.2", "/a", limited)),
				// half way: they weigh 2, so 2 more fit
				after(5*time.Second, times(get("127.0.0.2", "/a", ok), 2)),
				get("127.0.0.2", "/a", limited),
			},
		},
		{
			Name: "08c-token-bucket-timeline",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.TokenBucket, Limit: 1,
				Window: time.Second, Burst: 3}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("127.0.0.2", "/a", ok), 3),
				get("127.0.0.2", "/a", limited),
				after(999*time.Millisecond, get("127.0.0.2", "/a", limited)),
				after(time.Millisecond, get("127.0.0.2", "/a", ok)),
				get("127.0.0.2", "/a", limited),
				after(time.Hour, times(get("127.0.0.2", "/a", ok), 3)), // refills to Burst, not beyond
				get("127.0.0.2", "/a", limited),
			},
		},
		{
			// Policy.MaxWait: a request the bucket cannot take now
			// waits for its reserved slot (real time, which the store's
			// clock keeps up with between steps: RealTime) and is served
			// with the fields of any admitted request; 15 at once from a
			// fresh client (the clock stands still meanwhile, so the
			// slots stay where the store put them): the first at once,
			// 10 in the slots of the next 2 s, 4 limited.
			Name: "08d-token-bucket-requests-wait-for-a-slot",
			Policies: map[string]limit.Policy{"feed": {Name: "feed", Algorithm: limit.TokenBucket, Limit: 5,
				Window: time.Second, Burst: 1, MaxWait: 2 * time.Second, Disclosure: limit.DiscloseAlways}},
			App: AppSpec{Routes: []RouteSpec{{Method: "GET", Path: "/v1/feed", Mounts: []string{"feed"}}}},
			Steps: []Step{
				feedStep(0), feedStep(200 * time.Millisecond), feedStep(400 * time.Millisecond),
				after(5*time.Second, get("127.0.0.2", "/v1/feed", ok)),
			},
			Concurrent: &Concurrent{Client: "127.0.0.9", Path: "/v1/feed", Clients: 15, Allowed: 11},
			RealTime:   true,
		},
		{
			Name:     "09-retry-after-is-exact",
			Policies: map[string]limit.Policy{"g": fixed(2, 10*time.Second)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				after(3*time.Second, times(get("127.0.0.2", "/a", ok), 2)),
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Header: map[string]string{"Retry-After": "7"}}},
				after(6999*time.Millisecond, Step{Client: "127.0.0.2", Method: "GET", Path: "/a",
					Want: Want{Status: limited, Header: map[string]string{"Retry-After": "1"}}}),
				after(time.Millisecond, get("127.0.0.2", "/a", ok)),
			},
		},
		{
			Name: "10a-disclosure-always-ietf",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 2, Window: 10 * time.Second,
				AlignWindows: true, Disclosure: limit.DiscloseAlways}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit-Policy": `"2p10f";q=2;w=10`, "RateLimit": `"2p10f";r=1;t=10`, "Retry-After": "-"}}},
				after(4*time.Second, Step{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit": `"2p10f";r=0;t=6`}}}),
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Header: map[string]string{
					"RateLimit-Policy": `"2p10f";q=2;w=10`, "RateLimit": `"2p10f";r=0;t=6`, "Retry-After": "6",
					"Cache-Control": "no-store"}}},
			},
		},
		{
			Name: "10b-disclosure-none",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 1, Window: 10 * time.Second,
				AlignWindows: true, Disclosure: limit.DiscloseNone}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Header: map[string]string{"RateLimit": "-"}}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Header: map[string]string{
					"RateLimit": "-", "RateLimit-Policy": "-", "Retry-After": "-"}}},
			},
		},
		{
			Name: "10c-disclosure-on-limit-triplet-and-legacy",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 1, Window: 10 * time.Second,
				AlignWindows: true, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersTriplet | limit.HeadersLegacy}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit-Limit": "-", "X-RateLimit-Limit": "-"}}},
				after(2*time.Second, Step{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Header: map[string]string{
					"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "8", "RateLimit-Policy": "1;w=10",
					"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0",
					"X-RateLimit-Reset": strconv.FormatInt(epoch.Unix()+10, 10), "Retry-After": "8", "RateLimit": "-"}}}),
			},
		},
		{
			Name: "10d-disclosure-none-bare-limited-response",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 1, Window: 10 * time.Second,
				AlignWindows: true, Disclosure: limit.DiscloseNone}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a", Body: "a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Body: "a", Handler: "ran"}},
				// a bare status: no body, and so no Content-Type either
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, NoBody: true, Handler: "not-run", Header: map[string]string{
					"Content-Type": "-", "Cache-Control": "no-store", "Retry-After": "-", "RateLimit": "-"}}},
			},
		},
		{
			Name: "10e-disclosure-always-every-style",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 2, Window: 10 * time.Second,
				AlignWindows: true, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a", Status: 202, Body: "accepted"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: 202, Body: "accepted", Handler: "ran", Header: map[string]string{
					"RateLimit-Policy": `"2p10f";q=2;w=10`, "RateLimit": `"2p10f";r=1;t=10`,
					"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "10",
					"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": strconv.FormatInt(epoch.Unix()+10, 10),
					"Retry-After": "-", "Cache-Control": "-"}}},
				after(3*time.Second, Step{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: 202, Header: map[string]string{
					"RateLimit": `"2p10f";r=0;t=7`, "RateLimit-Remaining": "0", "RateLimit-Reset": "7",
					"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(epoch.Unix()+10, 10)}}}),
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Body: problem429, Handler: "not-run", Header: map[string]string{
					"RateLimit-Policy": `"2p10f";q=2;w=10`, "RateLimit": `"2p10f";r=0;t=7`,
					"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "7",
					"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(epoch.Unix()+10, 10),
					"Retry-After": "7", "Content-Type": problemJSON, "Cache-Control": "no-store"}}},
			},
		},
		{
			Name:     "11-denial-body",
			Policies: map[string]limit.Policy{"g": fixed(1, time.Minute)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				get("127.0.0.2", "/a", ok),
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Body: problem429,
					Header: map[string]string{"Content-Type": problemJSON, "Cache-Control": "no-store", "Retry-After": "60"}}},
			},
		},
		{
			Name:     "12a-spoofed-forwarding-headers-ignored-without-trust",
			Policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "203.0.113.1"}, {"X-Real-IP", "203.0.113.1"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "203.0.113.2"}, {"True-Client-IP", "203.0.113.2"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "203.0.113.3"}, {"Forwarded", "for=203.0.113.3"}, {"CF-Connecting-IP", "203.0.113.3"}}, Want: Want{Status: limited}},
			},
		},
		{
			Name:     "12b-trusted-header-hops",
			Policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			Options:  []limit.Option{limit.WithTrustedHeader("X-Forwarded-For", 1)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				// two sockets, one client behind the proxy: one bucket
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "203.0.113.5"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.3", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "203.0.113.5"}}, Want: Want{Status: ok}},
				// a spoofed left part changes nothing: the proxy's hop is read from the right
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "198.51.100.1, 203.0.113.5"}}, Want: Want{Status: limited}},
				// several header lines are one list
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "198.51.100.1"}, {"X-Forwarded-For", "203.0.113.5"}}, Want: Want{Status: limited}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "203.0.113.6"}}, Want: Want{Status: ok}},
				// header absent: the socket peer
				times(get("127.0.0.4", "/a", ok), 2),
				get("127.0.0.4", "/a", limited),
			},
		},
		{
			Name:     "12c-trusted-proxies-walk",
			Policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			Options:  []limit.Option{limit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"))},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "198.51.100.7, 10.1.2.3"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.3", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "6.6.6.6, 198.51.100.7"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "198.51.100.7"}}, Want: Want{Status: limited}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Forwarded-For", "198.51.100.8, 10.9.9.9, 127.0.0.5"}}, Want: Want{Status: ok}},
			},
		},
		{
			Name:     "13-fallback-bucket-without-client-address",
			Policies: map[string]limit.Policy{"g": fixed(20, time.Minute)},
			Options:  []limit.Option{limit.WithFallbackDivisor(10)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("unix", "/a", ok), 2),
				get("unix", "/a", limited),
				times(get("127.0.0.2", "/a", ok), 3), // a real address keeps the full limit
			},
		},
		{
			Name: "14-cost-above-one",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute,
				AlignWindows: true, CostFunc: costFromHeader}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Cost", "3"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Cost", "3"}}, Want: Want{Status: limited}},
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Header: [][2]string{{"X-Cost", "2"}}, Want: Want{Status: ok}},
				get("127.0.0.2", "/a", limited),
			},
		},
		{
			Name:     "15a-fail-open",
			Failure:  true,
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true, FailureMode: limit.FailOpen}},
			Timeout:  failTimeout,
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				get("127.0.0.2", "/a", ok),
				{Store: "fail", Client: "127.0.0.2", Method: "GET", Path: "/a", Times: 2, Want: Want{Status: ok, Handler: "ran"}},
				{Store: "ok", Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited}},
				// Last: a silent store opens the circuit breaker, after which
				// the failure mode decides for a cool-down without calling
				// the store (package guard's tests pin that).
				{Store: "hang", Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Handler: "ran"}},
			},
		},
		{
			Name:     "15b-fail-closed",
			Failure:  true,
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, AlignWindows: true, FailureMode: limit.FailClosed}},
			Timeout:  failTimeout,
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Store: "fail", Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: 503, Handler: "not-run",
					Header: map[string]string{"Retry-After": "1", "Cache-Control": "no-store"}}},
				{Store: "ok", Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok}},
				// Last, as in 15a: a silent store opens the circuit breaker.
				{Store: "hang", Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: 503, Handler: "not-run"}},
			},
		},
		{
			Name:     "15c-fail-local",
			Failure:  true,
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true, FailureMode: limit.FailLocal}},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				// the local store applies the same policy while the shared one fails
				{Store: "fail", Client: "127.0.0.2", Method: "GET", Path: "/a", Times: 2, Want: Want{Status: ok}},
				get("127.0.0.2", "/a", limited),
				get("127.0.0.3", "/a", ok),
			},
		},
		{
			Name:           "16a-on-limited-hook-called-once-per-denial",
			CountOnLimited: true,
			Policies:       map[string]limit.Policy{"g": fixed(2, time.Minute)},
			App:            AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("127.0.0.2", "/a", ok), 2),
				times(get("127.0.0.2", "/a", limited), 3),
			},
		},
		{
			Name: "16b-panicking-hook-and-limited-response",
			Policies: map[string]limit.Policy{
				"p": {Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true,
					OnLimited:       func(context.Context, limit.Request, limit.Decision) { panic("hook bug") },
					LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse { panic("builder bug") }},
				"c": {Name: "custom", Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, AlignWindows: true,
					LimitedResponse: func(context.Context, limit.Request, limit.Decision) *limit.LimitedResponse {
						return &limit.LimitedResponse{Header: http.Header{"X-Slow-Down": {"yes"}}, Body: []byte("slow down")}
					}},
			},
			App: AppSpec{Routes: []RouteSpec{{Method: "GET", Path: "/p", Mounts: []string{"p"}}, {Method: "GET", Path: "/c", Mounts: []string{"c"}}}},
			Steps: []Step{
				get("127.0.0.2", "/p", ok),
				{Client: "127.0.0.2", Method: "GET", Path: "/p", Want: Want{Status: limited, Body: problem429, Handler: "not-run"}},
				get("127.0.0.2", "/c", ok),
				{Client: "127.0.0.2", Method: "GET", Path: "/c", Want: Want{Status: limited, Body: "slow down", Handler: "not-run",
					Header: map[string]string{"X-Slow-Down": "yes", "Retry-After": "60", "Cache-Control": "no-store"}}},
			},
		},
		{
			Name:       "17-concurrency-exactness",
			Policies:   map[string]limit.Policy{"g": fixed(10, time.Minute)},
			App:        AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Concurrent: &Concurrent{Client: "127.0.0.9", Path: "/a", Clients: 100, Allowed: 10},
		},
		{
			Name:     "18-events-match-responses",
			Events:   true,
			Policies: map[string]limit.Policy{"g": fixed(3, time.Minute)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(get("127.0.0.2", "/a", ok), 3),
				times(get("127.0.0.2", "/a", limited), 4),
				times(get("127.0.0.3", "/a", ok), 2),
			},
		},
		{
			// Two mounts on one request: the IETF list fields carry both
			// policies in mount order; the single-value Triplet and Legacy
			// fields carry the one closer to exhaustion; a limited response
			// from the inner mount keeps the outer mount's members (the
			// outer one's as charged, before it gives the charge back).
			Name: "19-two-mounts-merge-header-fields",
			Policies: map[string]limit.Policy{
				"g": {Name: "global", Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute, AlignWindows: true,
					Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy},
				"login": {Name: "login", Algorithm: limit.FixedWindow, Limit: 5, Window: 10 * time.Second, AlignWindows: true,
					Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy},
			},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "POST", Path: "/login", Mounts: []string{"login"}}, {Method: "GET", Path: "/a"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit-Policy": `"global";q=100;w=60, "login";q=5;w=10`,
					"RateLimit":        `"global";r=99;t=60, "login";r=4;t=10`,
					"RateLimit-Limit":  "5", "RateLimit-Remaining": "4", "RateLimit-Reset": "10",
					"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": strconv.FormatInt(epoch.Unix()+10, 10)}}},
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: ok}}, 4),
				{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: limited, Handler: "not-run", Header: map[string]string{
					"RateLimit-Policy": `"global";q=100;w=60, "login";q=5;w=10`,
					"RateLimit":        `"global";r=94;t=60, "login";r=0;t=10`,
					"RateLimit-Limit":  "5", "RateLimit-Remaining": "0", "RateLimit-Reset": "10",
					"Retry-After": "10", "Cache-Control": "no-store", "Content-Type": problemJSON}}},
				// a limited login charges no mount: 5 logins + this request
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit": `"global";r=94;t=60`}}},
			},
		},
		{
			// Stacked mounts charge only what they admit: global Shared 10 per minute + PerRoute POST /login
			// 2 per minute; 5 logins leave 8 in the global limit (the GET
			// after them shows r=7, its own charge included; counting
			// every mount left 5).
			Name: "19b-c05-stacked-mounts-charge-only-admitted-requests",
			Policies: map[string]limit.Policy{
				"g":     {Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute, AlignWindows: true, Disclosure: limit.DiscloseAlways},
				"login": {Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true},
			},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "POST", Path: "/login", Mounts: []string{"login"}}, {Method: "GET", Path: "/a"}}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: ok}}, 2),
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/login", Want: Want{Status: limited, Handler: "not-run",
					Header: map[string]string{"RateLimit": `"10p60f";r=7;t=60`}}}, 3),
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit": `"10p60f";r=7;t=60`}}},
			},
		},
		{
			// Requests no route serves (404, 405) pass through a global
			// mount and count in its Shared bucket on every router, so a
			// scanner is limited like any client; once the allowance is
			// spent they get 429 like any request.
			Name:     "21-unmatched-requests-count-against-the-global-mount",
			Events:   true,
			Policies: map[string]limit.Policy{"g": fixed(3, time.Minute)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/v1/notes/{id}"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/nope", Want: Want{Status: 404, Handler: "not-run"}},
				{Client: "127.0.0.2", Method: "DELETE", Path: "/v1/notes/1", Want: Want{Status: 405, Handler: "not-run"}},
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/notes/1", Want: Want{Status: ok, Handler: "ran"}},
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/nope", Want: Want{Status: limited, Header: map[string]string{"Retry-After": "60"}}},
				{Client: "127.0.0.2", Method: "DELETE", Path: "/v1/notes/1", Want: Want{Status: limited}},
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/notes/1", Want: Want{Status: limited, Handler: "not-run"}},
				// another client has its own allowance
				{Client: "127.0.0.3", Method: "GET", Path: "/v1/nope", Want: Want{Status: 404}},
			},
		},
		{
			// CORS preflights (OPTIONS with Access-Control-Request-Method)
			// are not limited and not counted by default, even once the
			// client's allowance is spent; an OPTIONS request without that
			// header is an ordinary request.
			Name:     "22-cors-preflights-pass-unless-the-policy-opts-in",
			Events:   true,
			Policies: map[string]limit.Policy{"g": fixed(2, time.Minute)},
			App:      AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/v1/notes/{id}"}}},
			Steps: []Step{
				times(preflight("127.0.0.2", "/v1/notes/1", Want{NotLimited: true, Handler: "not-run", Skipped: true}), 3),
				times(get("127.0.0.2", "/v1/notes/1", ok), 2),
				get("127.0.0.2", "/v1/notes/1", limited),
				preflight("127.0.0.2", "/v1/notes/1", Want{NotLimited: true, Handler: "not-run", Skipped: true}),
				{Client: "127.0.0.2", Method: "OPTIONS", Path: "/v1/notes/1", Want: Want{Status: limited}},
			},
		},
		{
			// Policy.LimitPreflights: preflights count and are limited.
			Name:   "23-cors-preflights-limited-when-the-policy-opts-in",
			Events: true,
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute,
				AlignWindows: true, LimitPreflights: true}},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/v1/notes/{id}"}}},
			Steps: []Step{
				times(preflight("127.0.0.2", "/v1/notes/1", Want{NotLimited: true, Handler: "not-run"}), 2),
				preflight("127.0.0.2", "/v1/notes/1", Want{Status: limited}),
				get("127.0.0.2", "/v1/notes/1", limited),
			},
		},
		{
			// The adapter's typed key and cost functions see the framework's
			// own context.
			Name:           "20-typed-key-and-cost-functions",
			Policies:       map[string]limit.Policy{"g": fixed(3, time.Minute)},
			TypedKeyHeader: "X-Api-Key",
			TypedCostQuery: "cost",
			App:            AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/search"}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/search?cost=3", Header: [][2]string{{"X-Api-Key", "k1"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "GET", Path: "/search", Header: [][2]string{{"X-Api-Key", "k1"}}, Want: Want{Status: limited}},
				// another key from the same peer has its own allowance
				{Client: "127.0.0.2", Method: "GET", Path: "/search", Header: [][2]string{{"X-Api-Key", "k2"}}, Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "GET", Path: "/search?cost=3", Header: [][2]string{{"X-Api-Key", "k2"}}, Want: Want{Status: limited}},
				// no key: the identity falls through to the client address
				times(get("127.0.0.2", "/search", ok), 3),
				get("127.0.0.2", "/search", limited),
			},
		},
		{
			// Several quotas, all or nothing: 2 per 10 s and 3 per minute.
			// RateLimit-Policy lists both, RateLimit reports the one closest
			// to exhaustion, a limited request charges neither, Retry-After
			// is the limiting quota's.
			Name: "30-several-quotas-all-or-nothing",
			Policies: map[string]limit.Policy{"r": {Name: "reports", Algorithm: limit.FixedWindow, AlignWindows: true, Disclosure: limit.DiscloseAlways,
				Quotas: []limit.Rate{{Limit: 2, Window: 10 * time.Second}, {Limit: 3, Window: time.Minute}}}},
			App: AppSpec{Routes: []RouteSpec{{Method: "GET", Path: "/v1/reports", Mounts: []string{"r"}}}},
			Steps: []Step{
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/reports", Want: Want{Status: ok, Header: map[string]string{
					"RateLimit-Policy": `"reports/2p10f";q=2;w=10, "reports/3p60f";q=3;w=60`, "RateLimit": `"reports/2p10f";r=1;t=10`}}},
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/reports", Want: Want{Status: ok, Header: map[string]string{"RateLimit": `"reports/2p10f";r=0;t=10`}}},
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/reports", Want: Want{Status: limited, Handler: "not-run", Header: map[string]string{"Retry-After": "10"}}},
				// 10 s: the first quota is back; the minute's third (the
				// limited request took nothing from it).
				after(10*time.Second, Step{Client: "127.0.0.2", Method: "GET", Path: "/v1/reports", Want: Want{Status: ok, Header: map[string]string{"RateLimit": `"reports/3p60f";r=0;t=50`}}}),
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/reports", Want: Want{Status: limited, Header: map[string]string{"Retry-After": "50"}}},
				// another client has its own quotas
				get("127.0.0.3", "/v1/reports", ok),
			},
		},
		{
			// Per-plan limits: keys starting with "pro-" get 4 per minute,
			// every other identity 2; each plan has its own records and the
			// headers show the plan's numbers.
			Name: "31-per-plan-limits",
			Policies: map[string]limit.Policy{"e": {Name: "export", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 2, Window: time.Minute,
				Disclosure: limit.DiscloseAlways, KeyFunc: apiKey,
				Plans: map[string][]limit.Rate{"pro": {{Limit: 4, Window: time.Minute}}},
				Plan: func(r limit.Request) (string, error) {
					if k, _ := apiKey(r); len(k) > 4 && k[:4] == "pro-" {
						return "pro", nil
					}
					return "", nil
				}}},
			App: AppSpec{Routes: []RouteSpec{{Method: "GET", Path: "/v1/export", Mounts: []string{"e"}}}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Api-Key", "pro-1"}},
					Want: Want{Status: ok, Header: map[string]string{"RateLimit-Policy": `"export";q=4;w=60`}}}, 4),
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Api-Key", "pro-1"}}, Want: Want{Status: limited}},
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Api-Key", "free-1"}},
					Want: Want{Status: ok, Header: map[string]string{"RateLimit-Policy": `"export";q=2;w=60`}}}, 2),
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Api-Key", "free-1"}}, Want: Want{Status: limited}},
				// no key: the client address, on the default plan
				times(get("127.0.0.2", "/v1/export", ok), 2),
				get("127.0.0.2", "/v1/export", limited),
			},
		},
		{
			// The adapter's typed plan function reads the framework's own
			// context; the default plan has a name ("free") that the plan
			// function may return, and "" is the same plan.
			Name: "34-typed-plan-function-and-named-default-plan",
			Policies: map[string]limit.Policy{"e": {Name: "export", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 2, Window: time.Minute,
				Disclosure: limit.DiscloseAlways, DefaultPlan: "free", Plans: map[string][]limit.Rate{"pro": {{Limit: 4, Window: time.Minute}}}}},
			TypedPlanHeader: "X-Plan",
			App:             AppSpec{Routes: []RouteSpec{{Method: "GET", Path: "/v1/export", Mounts: []string{"e"}}}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Plan", "pro"}},
					Want: Want{Status: ok, Header: map[string]string{"RateLimit-Policy": `"export";q=4;w=60`}}}, 4),
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Plan", "pro"}}, Want: Want{Status: limited}},
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Plan", "free"}},
					Want: Want{Status: ok, Header: map[string]string{"RateLimit-Policy": `"export";q=2;w=60`}}},
				// no plan header: the default plan, the same records as "free"
				get("127.0.0.2", "/v1/export", ok),
				{Client: "127.0.0.2", Method: "GET", Path: "/v1/export", Header: [][2]string{{"X-Plan", "free"}}, Want: Want{Status: limited}},
			},
		},
		{
			// Shadow mode: a shadow policy on the whole router (2 per
			// minute) next to an enforcing one on the route (3 per minute):
			// the shadow policy never limits and writes no header field;
			// the enforcing one answers as usual.
			Name: "32-shadow-next-to-an-enforcing-mount",
			Policies: map[string]limit.Policy{
				"s":    {Name: "try", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 2, Window: time.Minute, Shadow: true, Disclosure: limit.DiscloseAlways},
				"real": {Name: "real", Algorithm: limit.FixedWindow, AlignWindows: true, Limit: 3, Window: time.Minute},
			},
			App: AppSpec{Global: []string{"s"}, Routes: []RouteSpec{{Method: "GET", Path: "/a", Mounts: []string{"real"}}, {Method: "GET", Path: "/b"}}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: ok, Handler: "ran", Header: map[string]string{"RateLimit-Policy": "-", "RateLimit": "-"}}}, 3),
				{Client: "127.0.0.2", Method: "GET", Path: "/a", Want: Want{Status: limited, Handler: "not-run", Header: map[string]string{"Retry-After": "60", "RateLimit": "-"}}},
				// only the shadow policy: never limited
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/b", Want: Want{Status: ok, Handler: "ran", Header: map[string]string{"Retry-After": "-"}}}, 5),
			},
		},
		{
			// Exactness under concurrency with several quotas: 10 per minute
			// and 4 per hour, 100 requests at once: exactly 4 admitted.
			Name: "33-several-quotas-concurrency-exactness",
			Policies: map[string]limit.Policy{"g": {Algorithm: limit.FixedWindow, AlignWindows: true,
				Quotas: []limit.Rate{{Limit: 10, Window: time.Minute}, {Limit: 4, Window: time.Hour}}}},
			App:        AppSpec{Global: []string{"g"}, Routes: []RouteSpec{{Method: "GET", Path: "/a"}}},
			Concurrent: &Concurrent{Client: "127.0.0.9", Path: "/a", Clients: 100, Allowed: 4},
		},
		{
			// Counting by outcome: a policy that counts only
			// failures (status >= 400) lets successes through free and
			// limits the 4th attempt after 3 failures, whatever it would
			// answer; the window's end gives the attempts back.
			Name: "24-count-by-status-only-failures-count",
			Policies: map[string]limit.Policy{"s": {Name: "signin", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute,
				AlignWindows: true, CountStatus: func(s int) bool { return s >= 400 }}},
			App: AppSpec{Routes: []RouteSpec{
				{Method: "POST", Path: "/ok", Mounts: []string{"s"}, Status: 204},
				{Method: "POST", Path: "/fail", Mounts: []string{"s"}, Status: 401},
			}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/ok", Want: Want{Status: 204}}, 5),
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/fail", Want: Want{Status: 401}}, 3),
				{Client: "127.0.0.2", Method: "POST", Path: "/ok", Want: Want{Status: limited, Handler: "not-run"}},
				{Client: "127.0.0.2", Method: "POST", Path: "/fail", Want: Want{Status: limited, Handler: "not-run"}},
				{Client: "127.0.0.3", Method: "POST", Path: "/ok", Want: Want{Status: 204}},
				after(time.Minute, Step{Client: "127.0.0.2", Method: "POST", Path: "/ok", Want: Want{Status: 204}}),
			},
		},
		{
			// Only successes count (status < 400), under a global mount
			// that counts everything: a failed request is given back to the
			// per-route policy only, and a request the per-route policy
			// limits charges the global one nothing.
			Name: "24b-count-by-status-successes-under-a-global-mount",
			Policies: map[string]limit.Policy{
				"g": {Name: "global", Algorithm: limit.FixedWindow, Limit: 6, Window: time.Minute, AlignWindows: true, Disclosure: limit.DiscloseAlways},
				"s": {Name: "uploads", Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, AlignWindows: true,
					CountStatus: func(s int) bool { return s < 400 }},
			},
			App: AppSpec{Global: []string{"g"}, Routes: []RouteSpec{
				{Method: "POST", Path: "/upload", Mounts: []string{"s"}, Status: 201},
				{Method: "POST", Path: "/bad", Mounts: []string{"s"}, Status: 422},
			}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/bad", Want: Want{Status: 422}}, 2),
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/upload", Want: Want{Status: 201}}, 2),
				// 4 admitted so far, all charged to the global limit
				{Client: "127.0.0.2", Method: "POST", Path: "/upload", Want: Want{Status: limited, Header: map[string]string{
					"RateLimit": `"global";r=1;t=60`}}},
				{Client: "127.0.0.2", Method: "POST", Path: "/bad", Want: Want{Status: limited, Header: map[string]string{
					"RateLimit": `"global";r=1;t=60`}}},
			},
		},
		{
			// Peek and Reset take the identity as the adapter's requests
			// key it: the client address, in any spelling; a Peek spends
			// nothing, and a Reset gives the client its whole quota back
			// while another client keeps its count.
			Name: "35-peek-and-reset-by-client-address",
			Policies: map[string]limit.Policy{"l": {Name: "login", Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute,
				AlignWindows: true}},
			App: AppSpec{Routes: []RouteSpec{{Method: "POST", Path: "/v1/login", Mounts: []string{"l"}}}},
			Steps: []Step{
				{Admin: &Admin{Policy: "l", Identity: "127.0.0.2", Allowed: true, Remaining: 2, WantIdentity: "127.0.0.2"}},
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/v1/login", Want: Want{Status: ok}}, 3),
				{Client: "127.0.0.3", Method: "POST", Path: "/v1/login", Want: Want{Status: ok}},
				{Client: "127.0.0.2", Method: "POST", Path: "/v1/login", Want: Want{Status: limited}},
				{Admin: &Admin{Policy: "l", Identity: "127.0.0.2", Allowed: false, Remaining: 0}},
				{Admin: &Admin{Policy: "l", Identity: "[::ffff:127.0.0.2]:80", Allowed: false, Remaining: 0, WantIdentity: "127.0.0.2"}},
				{Admin: &Admin{Policy: "l", Identity: "127.0.0.3", Allowed: true, Remaining: 1}},
				{Admin: &Admin{Policy: "l", Identity: "127.0.0.2:5", Reset: true}},
				{Admin: &Admin{Policy: "l", Identity: "127.0.0.2", Allowed: true, Remaining: 2}},
				times(Step{Client: "127.0.0.2", Method: "POST", Path: "/v1/login", Want: Want{Status: ok}}, 3),
				{Client: "127.0.0.2", Method: "POST", Path: "/v1/login", Want: Want{Status: limited}},
				{Admin: &Admin{Policy: "l", Identity: "127.0.0.3", Allowed: true, Remaining: 1}},
			},
		},
		{
			// GET /v1/slow: at most 2 requests of one client in flight
			// (Concurrency). Requests that end before the next starts
			// all pass (each gives its slot back), and carry no RateLimit
			// field even at DiscloseAlways (a concurrency limit is not a
			// rate); 6 at once on a handler that runs 1 s: exactly 2
			// admitted.
			Name: "36-concurrency-slots-in-flight",
			Policies: map[string]limit.Policy{"s": {Name: "slow", Algorithm: limit.Concurrency, Limit: 2,
				Disclosure: limit.DiscloseAlways}},
			App: AppSpec{Routes: []RouteSpec{
				{Method: "GET", Path: "/v1/slow", Mounts: []string{"s"}, Sleep: time.Second},
				{Method: "GET", Path: "/v1/quick", Mounts: []string{"s"}},
			}},
			Steps: []Step{
				times(Step{Client: "127.0.0.2", Method: "GET", Path: "/v1/quick", Want: Want{Status: ok, Handler: "ran",
					Header: map[string]string{"RateLimit": "-", "RateLimit-Policy": "-", "Retry-After": "-"}}}, 5),
			},
			Concurrent: &Concurrent{Client: "127.0.0.9", Path: "/v1/slow", Clients: 6, Allowed: 2},
		},
		otpBlockScenario(),
	}
}
