package conformance

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// RunAdapter runs every scenario through harness h against stores made by
// newStore, each scenario as a subtest with a fresh store, a fake clock at
// epoch and a fresh server. storeName labels the matrix row written to
// $QUOTAGATE_MATRIX_DIR (when set) for `make test` to print.
func RunAdapter(t *testing.T, h Harness, storeName string, newStore NewStoreFunc) {
	var passed, failed, skipped int
	for _, sc := range Scenarios() {
		var wasSkipped atomic.Bool
		ok := t.Run(sc.Name, func(t *testing.T) {
			t.Cleanup(func() { wasSkipped.Store(t.Skipped()) })
			runScenario(t, h, sc, newStore)
		})
		switch {
		case wasSkipped.Load():
			skipped++
		case ok:
			passed++
		default:
			failed++
		}
	}
	writeMatrix(t, h.Name(), storeName, passed, failed, skipped)
}

func writeMatrix(t *testing.T, adapter, store string, passed, failed, skipped int) {
	dir := os.Getenv("QUOTAGATE_MATRIX_DIR")
	if dir == "" {
		return
	}
	name := fmt.Sprintf("%s-%s-%d.tsv", adapter, store, os.Getpid())
	line := fmt.Sprintf("%s\t%s\t%d\t%d\t%d\n", adapter, store, passed, failed, skipped)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(line), 0o644); err != nil {
		t.Logf("conformance: cannot write the matrix row: %v", err)
	}
}

func runScenario(t *testing.T, h Harness, sc Scenario, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	var store limitstore.Store = newStore(t, clock.Now)
	var flaky *limittest.FlakyStore
	if sc.Failure {
		flaky = &limittest.FlakyStore{Store: store}
		g, err := guard.New(flaky, guard.WithTimeout(cmp.Or(sc.Timeout, 10*time.Second)), guard.WithoutDenyCache())
		if err != nil {
			t.Fatal(err)
		}
		store = g
	}
	// A service's own key prefix, as New asks for on a shared store.
	opts := append([]limit.Option{limit.WithKeyPrefix("conformance")}, sc.Options...)
	rec := &limittest.Recorder{}
	if sc.Events {
		opts = append(opts, limit.WithObserver(rec))
	}
	local := limit.WithLocalStore(newStore(t, clock.Now)) // for the FailLocal policies (New refuses it for others)
	var onLimited atomic.Int64
	limiters := map[string]*limit.Limiter{}
	for name, p := range sc.Policies {
		if sc.TypedKeyHeader != "" {
			p.KeyFunc = h.KeyFunc(sc.TypedKeyHeader)
		}
		if sc.TypedCostQuery != "" {
			p.CostFunc = h.CostFunc(sc.TypedCostQuery)
		}
		if sc.TypedPlanHeader != "" {
			p.Plan = h.PlanFunc(sc.TypedPlanHeader)
		}
		if sc.CountOnLimited {
			inner := p.OnLimited
			p.OnLimited = func(ctx context.Context, r limit.Request, d limit.Decision) {
				onLimited.Add(1)
				if inner != nil {
					inner(ctx, r, d)
				}
			}
		}
		popts := opts
		if p.FailureMode == limit.FailLocal {
			popts = append(slices.Clip(opts), local)
		}
		l, err := limit.New(store, p, popts...)
		if err != nil {
			t.Fatalf("policy %s: %v", name, err)
		}
		limiters[name] = l
	}
	mounts := func(names []string) []*limit.Limiter {
		var ls []*limit.Limiter
		for _, n := range names {
			l, ok := limiters[n]
			if !ok {
				t.Fatalf("scenario mounts unknown policy %q", n)
			}
			ls = append(ls, l)
		}
		return ls
	}
	routes := map[string]*Route{}
	route := func(rs RouteSpec) *Route {
		r := &Route{Method: rs.Method, Path: rs.Path, Limiters: mounts(rs.Mounts), Status: rs.Status, Body: rs.Body, Sleep: rs.Sleep}
		routes[rs.Method+" "+rs.Path] = r
		return r
	}
	app := &App{Global: mounts(sc.App.Global)}
	for _, g := range sc.App.Groups {
		grp := &Group{Prefix: g.Prefix, Limiters: mounts(g.Mounts)}
		for _, rs := range g.Routes {
			grp.Routes = append(grp.Routes, route(rs))
		}
		app.Groups = append(app.Groups, grp)
	}
	for _, rs := range sc.App.Routes {
		app.Routes = append(app.Routes, route(rs))
	}

	base, unixPath := serve(t, h, app)
	clients := map[string]*http.Client{}
	client := func(from string) *http.Client {
		if c, ok := clients[from]; ok {
			return c
		}
		var c *http.Client
		if from == "unix" {
			c = unixClient(unixPath)
		} else {
			c = limittest.ClientFrom(from)
		}
		t.Cleanup(c.CloseIdleConnections)
		clients[from] = c
		return c
	}

	hits := func() int64 {
		var n int64
		for _, r := range routes {
			n += r.Hits()
		}
		return n
	}
	responses := map[limit.Outcome]int{}
	// planned is the clock's reading by the scenario's Advances; ahead is
	// how far a RealTime clock has moved beyond it.
	planned := clock.Now()
	keepUp := limittest.RealTimeFloor(func(ms int64) { clock.Set(time.UnixMilli(ms)) })
	for i, st := range sc.Steps {
		planned = planned.Add(st.Advance)
		var ahead time.Duration
		if sc.RealTime {
			ahead = time.Duration(keepUp(planned.UnixMilli())-planned.UnixMilli()) * time.Millisecond
		} else {
			clock.Advance(st.Advance)
		}
		if st.Store != "" {
			if flaky == nil {
				t.Fatalf("step %d switches the store but the scenario has no Failure", i)
			}
			switch st.Store {
			case "fail":
				flaky.Fail()
			case "hang":
				flaky.Hang()
			case "ok":
				flaky.Heal()
			default:
				t.Fatalf("step %d: unknown store mode %q", i, st.Store)
			}
		}
		if st.Admin != nil {
			admin(t, i, limiters[st.Admin.Policy], st.Admin)
			continue
		}
		n := max(st.Times, 1)
		for k := 0; k < n; k++ {
			before := hits()
			sent := time.Now()
			got := send(t, client(st.Client), st, base)
			where := fmt.Sprintf("step %d (%s %s from %s, #%d)", i, st.Method, st.Path, st.Client, k+1)
			check(t, where, st.Want, got)
			if took := time.Since(sent); took < st.Want.Delay-ahead {
				t.Errorf("%s: answered after %v, want no sooner than %v (the wait for its slot, %v less: the clock is that far ahead)",
					where, took, st.Want.Delay-ahead, ahead)
			}
			// The handler's own count, not only its header: a handler
			// that runs after the denial was written cannot set headers.
			ran := hits() - before
			switch {
			case st.Want.Handler == "ran" && ran != 1:
				t.Errorf("%s: the handler ran %d times, want once", where, ran)
			case (st.Want.Handler == "not-run" || got.status == http.StatusTooManyRequests) && ran != 0:
				t.Errorf("%s: the handler ran for a denied request", where)
			}
			switch {
			case st.Want.Skipped:
			case got.status == http.StatusTooManyRequests || got.status == http.StatusServiceUnavailable:
				responses[limit.OutcomeLimited]++
			default:
				responses[limit.OutcomeAllowed]++
			}
		}
	}
	// handler-run accounting across the whole scenario: every response whose
	// handler header was seen matches a hit on the route.
	if sc.Concurrent != nil {
		runConcurrent(t, client(sc.Concurrent.Client), base, sc.Concurrent)
	}
	if sc.CountOnLimited && onLimited.Load() != int64(responses[limit.OutcomeLimited]) {
		t.Fatalf("OnLimited ran %d times for %d denials", onLimited.Load(), responses[limit.OutcomeLimited])
	}
	if sc.Events {
		outcomes := map[limit.Outcome]int{}
		for _, e := range rec.Decisions() {
			outcomes[e.Outcome]++
		}
		if outcomes[limit.OutcomeAllowed] != responses[limit.OutcomeAllowed] ||
			outcomes[limit.OutcomeLimited] != responses[limit.OutcomeLimited] || outcomes[limit.OutcomeDegraded] != 0 {
			t.Fatalf("events %v, responses %v: want one event per response with the same outcome", outcomes, responses)
		}
	}
}

// admin runs step i, a call of Limiter.Peek or Reset on l.
func admin(t *testing.T, i int, l *limit.Limiter, a *Admin) {
	t.Helper()
	if l == nil {
		t.Fatalf("step %d: Admin names unknown policy %q", i, a.Policy)
	}
	ctx := context.Background()
	if a.Reset {
		if err := l.Reset(ctx, a.Identity); err != nil {
			t.Fatalf("step %d: Reset(%q): %v", i, a.Identity, err)
		}
		return
	}
	d, err := l.Peek(ctx, a.Identity)
	switch {
	case err != nil:
		t.Fatalf("step %d: Peek(%q): %v", i, a.Identity, err)
	case d.Allowed != a.Allowed || d.Remaining != a.Remaining:
		t.Errorf("step %d: Peek(%q) = allowed %v, remaining %d; want %v, %d", i, a.Identity, d.Allowed, d.Remaining, a.Allowed, a.Remaining)
	case a.WantIdentity != "" && d.Identity() != a.WantIdentity:
		t.Errorf("step %d: Peek(%q).Identity() = %q, want %q", i, a.Identity, d.Identity(), a.WantIdentity)
	case d.Blocked != a.Blocked || a.RetryAfter != 0 && d.RetryAfter != a.RetryAfter:
		t.Errorf("step %d: Peek(%q) = blocked %v, retry after %v; want %v, %v", i, a.Identity, d.Blocked, d.RetryAfter, a.Blocked, a.RetryAfter)
	}
}

// serve starts the harness on a TCP listener (and, for scenarios with a
// "unix" client, on a Unix socket too) and returns the base URL and socket
// path.
func serve(t *testing.T, h Harness, app *App) (string, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Serve(t, ln, app)
	// A short path: Unix socket paths are limited to ~100 bytes.
	dir, err := os.MkdirTemp("", "qg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	unixPath := filepath.Join(dir, "s")
	uln, err := net.Listen("unix", unixPath)
	if err != nil {
		t.Fatal(err)
	}
	h.Serve(t, uln, app)
	return "http://" + ln.Addr().String(), unixPath
}

func unixClient(path string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}},
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, c *http.Client, st Step, base string) response {
	t.Helper()
	req, err := http.NewRequest(st.Method, base+st.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range st.Header {
		req.Header.Add(kv[0], kv[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", st.Method, st.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", st.Method, st.Path, err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func check(t *testing.T, where string, want Want, got response) {
	t.Helper()
	if want.Status != 0 && got.status != want.Status {
		t.Errorf("%s: status %d, want %d (body %q)", where, got.status, want.Status, got.body)
	}
	if want.NotLimited && (got.status == http.StatusTooManyRequests || got.status == http.StatusServiceUnavailable || got.header.Get("Retry-After") != "") {
		t.Errorf("%s: status %d (Retry-After %q), want the router's own answer: not limited", where, got.status, got.header.Get("Retry-After"))
	}
	for name, v := range want.Header {
		vals := got.header.Values(name)
		switch {
		case v == "-" && len(vals) > 0:
			t.Errorf("%s: header %s = %q, want it absent", where, name, vals)
		case v != "-" && strings.Join(vals, ", ") != v:
			t.Errorf("%s: header %s = %q, want %q", where, name, vals, v)
		}
	}
	if want.Body != "" && got.body != want.Body {
		t.Errorf("%s: body %q, want %q", where, got.body, want.Body)
	}
	if want.NoBody && got.body != "" {
		t.Errorf("%s: body %q, want none", where, got.body)
	}
	ran := got.header.Get(HandlerHeader) == "ran"
	switch want.Handler {
	case "ran":
		if !ran {
			t.Errorf("%s: the handler did not run", where)
		}
	case "not-run":
		if ran {
			t.Errorf("%s: the handler ran for a denied request", where)
		}
	}
	if got.status == http.StatusTooManyRequests && ran {
		t.Errorf("%s: a 429 carries the handler's header: the handler ran", where)
	}
}

func runConcurrent(t *testing.T, c *http.Client, base string, cc *Concurrent) {
	var wg sync.WaitGroup
	var allowed, other atomic.Int64
	start := make(chan struct{})
	for i := 0; i < cc.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := c.Get(base + cc.Path)
			if err != nil {
				other.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				allowed.Add(1)
			case http.StatusTooManyRequests:
			default:
				other.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if allowed.Load() != int64(cc.Allowed) || other.Load() != 0 {
		t.Fatalf("%d concurrent requests: %d admitted (%d errors), want exactly %d", cc.Clients, allowed.Load(), other.Load(), cc.Allowed)
	}
}
