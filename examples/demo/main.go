// Command demo runs one example server on a free loopback port and drives real
// HTTP traffic at it from several client addresses (127.0.0.2, 127.0.0.3, ...:
// each dials from its own loopback address, so the server sees distinct socket
// peers), prints what each client got per route, checks it against the example
// policies and against the server's GET /metrics, prints the quotagate_
// lines of /metrics, then its verdict, stops the server and exits 0 (1 when
// the limiter misbehaved).
//
//	cd examples && go run ./demo -framework chi
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// frameworks are the HTTP example servers, one directory of examples/ each.
var frameworks = []string{"chi", "echo", "echov5", "fiber", "fiberv3", "gin", "nethttp"}

// grpcServer is the gRPC example server (examples/grpc), which runGRPC
// drives with a gRPC client.
const grpcServer = "grpc"

// valid lists every server the demo drives.
func valid() string { return strings.Join(append(slices.Clone(frameworks), grpcServer), ", ") }

func main() {
	framework := flag.String("framework", "chi", "example server to run: "+valid())
	flag.Parse()
	if err := run(*framework); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// row is one line of the table: one client on one route.
type row struct {
	route, client            string
	sent, ok, limited, other int
	retryAfter               string
}

func run(framework string) error {
	if !slices.Contains(frameworks, framework) && framework != grpcServer {
		return fmt.Errorf("unknown framework %q: valid frameworks are %s (make demo FRAMEWORK=chi)", framework, valid())
	}
	if _, err := os.Stat(filepath.Join(framework, "main.go")); err != nil {
		return fmt.Errorf("no example server %q here (run from examples/): %w", framework, err)
	}
	if framework == grpcServer {
		return runGRPC()
	}
	// -disclosure always: every response carries the RateLimit fields, so
	// the demo can show the quotas of /v1/reports and the plans of
	// /v1/export.
	base, banner, stop, err := start(framework, "-disclosure", "always", "-admin-token", adminToken, "-tz", *dailyTZ)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println("server:", banner)
	fmt.Println("store: memory, the embedded default (nothing to install)")

	var rows []row
	sendTo := func(base, route, client, method, path string, n int, header ...[2]string) row {
		r := row{route: route, client: client}
		c := limittest.ClientFrom(client)
		defer c.CloseIdleConnections()
		for i := 0; i < n; i++ {
			p := strings.ReplaceAll(path, "{i}", fmt.Sprint(i%7+1))
			status, h, err := request(c, method, base+p, header...)
			r.sent++
			switch {
			case err != nil:
				r.other++
			case status == http.StatusOK:
				r.ok++
			case status == http.StatusTooManyRequests:
				r.limited++
				if r.retryAfter == "" {
					r.retryAfter = h.Get("Retry-After") + " s"
				}
			default:
				r.other++
			}
		}
		if r.retryAfter == "" {
			r.retryAfter = "-"
		}
		rows = append(rows, r)
		return r
	}
	send := func(route, client, method, path string, n int, header ...[2]string) row {
		return sendTo(base, route, client, method, path, n, header...)
	}

	// A fixed window rolls at one instant of each minute for each client
	// (a phase per identity), and a burst that spans that instant is
	// admitted twice over: a fixed-window sequence that does not come out
	// as promised is repeated once from a spare address, whose window rolls
	// at another instant (a fault fails both).
	// GET /v1/daily first: about 10 s at two a second, before the fixed
	// windows below start (the admin checks read the login window spent
	// here, which must not roll meanwhile).
	daily := sendDaily(base)
	rows = append(rows, daily.row)
	loginClient := "127.0.0.2"
	loginA := send("POST /v1/login", loginClient, "POST", "/v1/login", 8)
	loginAll := loginA // every login burst, for the metrics
	if loginA.ok != 5 || loginA.limited != 3 {
		fmt.Printf("POST /v1/login from %s: %d x 200, %d x 429; its fixed window may have rolled during the burst: again from 127.0.0.20\n", loginClient, loginA.ok, loginA.limited)
		loginClient = "127.0.0.20"
		loginA = send("POST /v1/login", loginClient, "POST", "/v1/login", 8)
		loginAll.ok, loginAll.limited = loginAll.ok+loginA.ok, loginAll.limited+loginA.limited
	}
	loginB := send("POST /v1/login", "127.0.0.3", "POST", "/v1/login", 3)
	search := send("GET /v1/search", "127.0.0.4", "GET", "/v1/search", 8)
	expensive := send("GET /v1/search?expensive=1", "127.0.0.6", "GET", "/v1/search?expensive=1", 3)
	notes := send("GET /v1/notes/{id}", "127.0.0.5", "GET", "/v1/notes/{i}", 95)
	heads := send("HEAD /v1/notes/{id}", "127.0.0.5", "HEAD", "/v1/notes/{i}", 10)
	health := send("GET /health", "127.0.0.5", "GET", "/health", 3)
	reports := send("GET /v1/reports", "127.0.0.10", "GET", "/v1/reports", 4)
	exportPro := send("GET /v1/export X-API-Key: pro-demo", "127.0.0.12", "GET", "/v1/export", 22, [2]string{"X-API-Key", "pro-demo"})
	exportFree := send("GET /v1/export X-API-Key: free-demo", "127.0.0.13", "GET", "/v1/export", 7, [2]string{"X-API-Key", "free-demo"})
	exportNone := send("GET /v1/export (no key)", "127.0.0.15", "GET", "/v1/export", 6)
	// GET /v1/feed: token bucket 5/s, burst 1, MaxWait 2 s. Requests sent
	// at once are served one slot (200 ms) apart instead of limited: 10
	// all within about 2 s; of 20, those whose slot begins within 2 s
	// (about 10), the rest 429 at once.
	// The two bursts come from two clients (two buckets), side by side.
	// GET /v1/slow?ms=1500: at most 2 in flight per client (Concurrency):
	// of 6 at once, 2 are served and 4 refused at once. Sent while the feed
	// bursts wait, so that the demo takes no longer.
	var slow row
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		slow, _ = sendAtOnce(base, "GET /v1/slow?ms=1500 (6 at once)", "127.0.0.40", "/v1/slow?ms=1500", 6)
	}()
	var feed20 row
	feed20done := make(chan struct{})
	go func() {
		defer close(feed20done)
		feed20, _ = sendAtOnce(base, "GET /v1/feed (20 at once)", "127.0.0.31", "/v1/feed", 20)
	}()
	feed10, feed10Took := sendAtOnce(base, "GET /v1/feed (10 at once)", "127.0.0.30", "/v1/feed", 10)
	<-feed20done
	<-slowDone
	rows = append(rows, feed10, feed20, slow)
	reportsPolicy := policyField(base+"/v1/reports", "127.0.0.14")
	proPolicy := policyField(base+"/v1/export", "127.0.0.16", [2]string{"X-API-Key", "pro-other"})
	freePolicy := policyField(base+"/v1/export", "127.0.0.16", [2]string{"X-API-Key", "other"})

	// The same server with -shadow: every limiter decides and counts, none
	// limits.
	fmt.Println("\nthe same server again with -shadow, for the shadow-mode checks below (its log lines, if any, follow):")
	shadowBase, _, stopShadow, err := start(framework, "-shadow")
	if err != nil {
		return err
	}
	defer stopShadow()
	shadowLogin := sendTo(shadowBase, "-shadow: POST /v1/login", "127.0.0.2", "POST", "/v1/login", 8)
	shadowReports := sendTo(shadowBase, "-shadow: GET /v1/reports", "127.0.0.2", "GET", "/v1/reports", 4)
	noAdmin, _, _ := request(limittest.ClientFrom("127.0.0.31"), "GET", shadowBase+"/admin/limits/127.0.0.2", [2]string{"Authorization", "Bearer " + adminToken})
	shadowLines, err := metricLines(shadowBase + "/metrics")
	if err != nil {
		return err
	}
	shadowM := parseRequests(shadowLines)
	shadowLoginLimited := shadowM.sum("/v1/login", true, "shadow-limited")
	if shadowLoginLimited != 3 { // a fixed window rolled (see loginClient)?
		fmt.Printf("-shadow: POST /v1/login from 127.0.0.2: %v would-be limits; its fixed window may have rolled during the burst: again from 127.0.0.21\n", shadowLoginLimited)
		shadowLogin = sendTo(shadowBase, "-shadow: POST /v1/login", "127.0.0.21", "POST", "/v1/login", 8)
		if shadowLines, err = metricLines(shadowBase + "/metrics"); err != nil {
			return err
		}
		shadowM = parseRequests(shadowLines)
		shadowLoginLimited = shadowM.sum("/v1/login", true, "shadow-limited") - shadowLoginLimited
	}

	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tCLIENT\tSENT\t200\t429\tOTHER\tFIRST RETRY-AFTER")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.route, r.client, r.sent, r.ok, r.limited, r.other, r.retryAfter)
	}
	tw.Flush()
	fmt.Println()

	// What the example policies promise; a demo that shows otherwise fails.
	var problems []string
	check := func(ok bool, msg string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			problems = append(problems, msg)
		}
		fmt.Println(mark, msg)
	}
	check(loginA.ok == 5 && loginA.limited == 3, "login: client "+loginClient+" gets 5 x 200, then 429 (fixed window 5/60s per client)")
	check(loginB.ok == 3 && loginB.limited == 0, "login: client 127.0.0.3 still gets 200 while "+loginClient+" is limited")
	// The token bucket refills 1 per second while the demo runs, so a slow
	// machine may see one more 200 than a fast one; the burst must hold.
	check(search.ok >= 5 && search.limited >= 1, "search: burst of 5, then 429 (token bucket 1/s)")
	check(expensive.ok >= 1 && expensive.limited >= 1 && expensive.ok < 3, "search: ?expensive=1 costs 3 of the burst of 5")
	check(notes.ok+heads.ok == 100 && notes.limited+heads.limited == 5, "notes: GET and HEAD share the global 100/60s; request 101 gets 429")
	check(health.ok == 3, "health: not limited, even for a limited client")
	var reportsRetry int
	fmt.Sscanf(reports.retryAfter, "%d s", &reportsRetry)
	check(reports.ok == 2 && reports.limited == 2 && reportsRetry >= 1 && reportsRetry <= 15,
		"reports: 2 x 200, then 429 from the 2 per 10 s quota (Retry-After at most 15 s: the sliding window weighs the previous 10 s)")
	check(feed10.ok == 10 && feed10.limited == 0 && feed10Took < feedMaxWait+500*time.Millisecond,
		fmt.Sprintf("feed: 10 requests at once all served, one per 200 ms slot, the last after %v (MaxWait 2 s)", feed10Took.Round(time.Millisecond)))
	check(feed20.ok >= 10 && feed20.ok <= 12 && feed20.limited == 20-feed20.ok,
		fmt.Sprintf("feed: 20 at once: %d served within 2 s, %d limited at once", feed20.ok, feed20.limited))
	check(slow.ok == 2 && slow.limited == 4 && slow.retryAfter == "1 s",
		fmt.Sprintf("slow: 6 at once, %d served and %d refused at once with Retry-After 1 (2 in flight per client)", slow.ok, slow.limited))
	check(strings.Contains(reportsPolicy, `"reports/2p10";q=2;w=10, "reports/5p60";q=5;w=60`),
		"reports: RateLimit-Policy lists both quotas: "+reportsPolicy)
	check(exportPro.ok == 20 && exportPro.limited == 2, "export: a pro- key gets 20 per 60 s (plan pro)")
	check(exportFree.ok == 5 && exportFree.limited == 2, "export: another key gets 5 per 60 s (the default plan)")
	check(exportNone.ok == 5 && exportNone.limited == 1, "export: no key: keyed by client address, 5 per 60 s")
	check(strings.Contains(proPolicy, `"export";q=20;w=60`) && strings.Contains(freePolicy, `"export";q=5;w=60`),
		"export: RateLimit-Policy shows the plan's numbers: "+proPolicy+" / "+freePolicy)
	checkDaily(daily, check)
	check(noAdmin == http.StatusNotFound, fmt.Sprintf("admin: a server without -admin-token has no admin route (GET /admin/limits/127.0.0.2: %d, want 404)", noAdmin))
	check(shadowLogin.ok == 8 && shadowReports.ok == 4, "-shadow: no 429 at all (8 logins and 4 reports admitted)")
	check(shadowLoginLimited == 3 && shadowM.sum("/v1/reports", true, "shadow-limited") == 2 && shadowM.total("limited") == 0,
		"-shadow: /metrics counts the would-be limits as outcome=\"shadow-limited\" (3 logins, 2 reports) and no limited")
	for _, r := range rows {
		check(r.other == 0, fmt.Sprintf("%s from %s: no status other than 200/429", r.route, r.client))
	}

	// GET /metrics: the limiter's own account of the same traffic.
	lines, err := metricLines(base + "/metrics")
	if err != nil {
		return err
	}
	m := parseRequests(lines)
	perRoute := func(handler, outcome string) float64 { return m.sum(handler, true, outcome) }
	global := func(handler, outcome string) float64 { return m.sum(handler, false, outcome) }
	check(perRoute("/v1/login", "allowed") == float64(loginAll.ok+loginB.ok) && perRoute("/v1/login", "limited") == float64(loginAll.limited+loginB.limited),
		"metrics: the login bucket counts the table's login 200s as allowed and its 429s as limited")
	check(perRoute("/v1/search", "allowed") == float64(search.ok+expensive.ok) && perRoute("/v1/search", "limited") == float64(search.limited+expensive.limited),
		"metrics: the search bucket counts the table's search 200s and 429s")
	check(global("/v1/notes/{id}", "allowed") == float64(notes.ok+heads.ok) && global("/v1/notes/{id}", "limited") == float64(notes.limited+heads.limited),
		"metrics: the global bucket counts the table's notes 200s and 429s (GET and HEAD)")
	check(m.total("degraded") == 0, "metrics: no degraded decisions (the memory store never fails)")
	waited := -1.0
	for _, line := range lines {
		if v, ok := strings.CutPrefix(line, `quotagate_wait_seconds_count{bucket="feed",result="served"} `); ok {
			fmt.Sscan(v, &waited)
		}
	}
	check(waited == float64(feed10.ok-1+feed20.ok-1),
		fmt.Sprintf("metrics: quotagate_wait_seconds counts the %d feed requests that waited for their slot (all served but the first of each burst)", feed10.ok-1+feed20.ok-1))
	check(m.handlers["/health"] == 0 && m.handlers["/metrics"] == 0, "metrics: /health and /metrics are not limited, so not counted")
	unmatched(framework, base, check)
	signinAndStacked(base, loginClient, check)
	adminReset(base, loginClient, check)
	otpBlock(base, check)
	sharedSlots(framework, check)

	// The dump is read last, so it also counts the probes the checks above
	// sent (RateLimit-Policy reads, unmatched requests, sign-ins); the
	// verdict follows it, the last line a newcomer reads.
	if final, err := metricLines(base + "/metrics"); err == nil {
		lines = final
	}
	printMetrics(lines)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("\ndemo passed: the limiter admitted and denied exactly as configured")
	return nil
}

// start builds examples/<framework>, starts it with flags on a free
// loopback port and returns its base URL, its start-up line and a function that stops it.
func start(framework string, flags ...string) (base, banner string, stop func(), err error) {
	bin, dir, err := build(framework)
	if err != nil {
		return "", "", nil, err
	}
	return startBin(bin, dir, flags...)
}

// build builds examples/<framework> into a new temporary directory and
// returns the binary and the directory.
func build(framework string) (bin, dir string, err error) {
	dir, err = os.MkdirTemp("", "quotagate-demo-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "server")
	fmt.Printf("building examples/%s ...\n", framework)
	build := exec.Command("go", "build", "-o", bin, "./"+framework)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build ./%s: %w", framework, err)
	}
	return bin, dir, nil
}

// startBin starts bin with flags on a free loopback port, as start does;
// stop removes dir ("": nothing) once the server has ended.
func startBin(bin, dir string, flags ...string) (base, banner string, stop func(), err error) {
	return startBinTo(os.Stderr, bin, dir, flags...)
}

// startBinTo is startBin with the server's standard error written to
// stderr; once stop has returned, everything the server wrote is there.
func startBinTo(stderr io.Writer, bin, dir string, flags ...string) (base, banner string, stop func(), err error) {
	srv := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, flags...)...)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		removeDir(dir)
		return "", "", nil, err
	}
	srv.Stderr = stderr
	if err := srv.Start(); err != nil {
		removeDir(dir)
		return "", "", nil, err
	}
	stop = func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
		removeDir(dir)
	}
	base, banner, err = waitForStart(stdout)
	if err != nil {
		stop()
		return "", "", nil, err
	}
	return base, banner, stop, nil
}

// unmatched checks the one rule every example follows for requests no
// route serves and for CORS preflights: a client that spent its
// global 100 per 60 s gets 429 for GET /v1/nope, DELETE /v1/notes/1 and
// FOO /v1/notes/1 (they count in the global bucket like any request), while
// its preflight OPTIONS /v1/notes/1 is not limited; a fresh client gets the
// router's 404 and 405. One exception, from fiber itself: fiber answers a
// method it does not know (FOO) before running any handler, so no limiter
// sees it (v2 with 400, v3 with 501 Not Implemented).
func unmatched(framework, base string, check func(bool, string)) {
	foo := http.StatusMethodNotAllowed
	fooLimited := http.StatusTooManyRequests
	switch framework {
	case "fiber":
		foo, fooLimited = http.StatusBadRequest, http.StatusBadRequest
	case "fiberv3":
		foo, fooLimited = http.StatusNotImplemented, http.StatusNotImplemented
	}
	preflight := [][2]string{{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "GET"}}
	status := func(client, method, path string, header ...[2]string) (int, string) {
		c := limittest.ClientFrom(client)
		defer c.CloseIdleConnections()
		st, h, err := request(c, method, base+path, header...)
		if err != nil {
			return 0, ""
		}
		return st, h.Get("Retry-After")
	}
	const fresh, spent = "127.0.0.8", "127.0.0.9"
	st404, _ := status(fresh, "GET", "/v1/nope")
	st405, _ := status(fresh, "DELETE", "/v1/notes/1")
	stFoo, _ := status(fresh, "FOO", "/v1/notes/1")
	stPre, raPre := status(fresh, "OPTIONS", "/v1/notes/1", preflight...)
	check(st404 == http.StatusNotFound && st405 == http.StatusMethodNotAllowed && stFoo == foo,
		fmt.Sprintf("unmatched: a fresh client gets the router's answers: GET /v1/nope %d, DELETE %d, FOO %d (want 404, 405, %d)", st404, st405, stFoo, foo))
	check(stPre != http.StatusTooManyRequests && raPre == "", fmt.Sprintf("preflight: OPTIONS with Access-Control-Request-Method is not limited (%d)", stPre))
	ok := 0
	for i := 0; i < 100; i++ {
		if st, _ := status(spent, "GET", "/v1/notes/1"); st == http.StatusOK {
			ok++
		}
	}
	st404, _ = status(spent, "GET", "/v1/nope")
	st405, _ = status(spent, "DELETE", "/v1/notes/1")
	stFoo, _ = status(spent, "FOO", "/v1/notes/1")
	stPre, raPre = status(spent, "OPTIONS", "/v1/notes/1", preflight...)
	check(ok == 100 && st404 == http.StatusTooManyRequests && st405 == http.StatusTooManyRequests && stFoo == fooLimited,
		fmt.Sprintf("unmatched: once its global 100/60s is spent, a client gets 429 for GET /v1/nope %d, DELETE %d, FOO %d (want 429, 429, %d)", st404, st405, stFoo, fooLimited))
	check(stPre != http.StatusTooManyRequests && raPre == "", fmt.Sprintf("preflight: still not limited for that client (%d)", stPre))
}

// policyField sends one GET to url from client and returns its
// RateLimit-Policy field lines joined by ", " (one list).
func policyField(url, client string, header ...[2]string) string {
	c := limittest.ClientFrom(client)
	defer c.CloseIdleConnections()
	_, h, err := request(c, "GET", url, header...)
	if err != nil {
		return err.Error()
	}
	return strings.Join(h.Values("Ratelimit-Policy"), ", ")
}

// signinAndStacked shows counting by outcome (POST /v1/signin counts only
// failed attempts) and stacked mounts (a login the per-route limit answers
// 429 charges the global limit nothing).
func signinAndStacked(base, loginClient string, check func(bool, string)) {
	// A fixed window: repeated once from a spare address when it does not
	// come out as promised (see loginClient in run).
	var ok bool
	for i, client := range []string{"127.0.0.7", "127.0.0.22"} {
		c := limittest.ClientFrom(client)
		var got []string
		attempt := func(password string) int {
			st, _, err := request(c, "POST", base+"/v1/signin", [2]string{"X-Password", password})
			if err != nil {
				st = 0
			}
			got = append(got, fmt.Sprint(st))
			return st
		}
		ok = attempt("open-sesame") == http.StatusNoContent && attempt("open-sesame") == http.StatusNoContent
		for range 3 {
			ok = attempt("guess") == http.StatusUnauthorized && ok
		}
		ok = attempt("open-sesame") == http.StatusTooManyRequests && ok
		ok = attempt("guess") == http.StatusTooManyRequests && ok
		c.CloseIdleConnections()
		fmt.Printf("\nPOST /v1/signin from %s (right, right, wrong x3, right, wrong): %s\n", client, strings.Join(got, " "))
		if ok || i > 0 {
			break
		}
		fmt.Println("its fixed window may have rolled during the sequence: again from another address")
	}
	check(ok, "signin: successes are free; after 3 failed attempts the next gets 429 whatever its password (fixed window 3 failures/60s)")

	// loginClient sent 8 logins above: 5 admitted, 3 limited by the login
	// limit. Only the 5 stay charged to the global limit, so one more
	// request shows r=94 in the global member (100 - 5 - itself).
	lc := limittest.ClientFrom(loginClient)
	defer lc.CloseIdleConnections()
	_, h, err := request(lc, "GET", base+"/v1/notes/1")
	rl := ""
	if err == nil {
		rl = h.Get("RateLimit")
	}
	fmt.Printf("GET /v1/notes/1 from %s after its 8 logins: RateLimit: %s\n", loginClient, rl)
	check(strings.Contains(rl, `"100p60";r=94;`), "stacked mounts: the 3 limited logins charged the global limit nothing (global member r=94, not 91)")
}

// adminToken is the demo server's -admin-token.
const adminToken = "demo-token"

// adminReset shows the admin routes: loginClient spent its login quota
// above; GET /admin/limits/{identity} shows it limited (without the token:
// 401), DELETE resets it (204), and its next login is admitted.
func adminReset(base, loginClient string, check func(bool, string)) {
	c := limittest.ClientFrom("127.0.0.30")
	defer c.CloseIdleConnections()
	bearer := [2]string{"Authorization", "Bearer " + adminToken}
	url := base + "/admin/limits/" + loginClient
	lc := limittest.ClientFrom(loginClient)
	defer lc.CloseIdleConnections()
	// The login window (60 s) may have rolled since the burst on a loaded
	// machine: spend it again (at most 5 more logins) so that the look
	// below sees it spent whatever the time.
	for range 6 {
		if st, _, _ := request(lc, "POST", base+"/v1/login"); st == http.StatusTooManyRequests {
			break
		}
	}
	noToken, _, _ := request(c, "GET", url)
	before, beforeOK := adminPeek(c, url, bearer)
	del, _, _ := request(c, "DELETE", url, bearer)
	after, afterOK := adminPeek(c, url, bearer)
	login, _, _ := request(lc, "POST", base+"/v1/login")
	fmt.Printf("\nGET /admin/limits/%s: login %s\nDELETE: %d; GET again: login %s; POST /v1/login from %s: %d\n",
		loginClient, before, del, after, loginClient, login)
	check(noToken == http.StatusUnauthorized, "admin: without the Bearer token the admin routes answer 401")
	check(beforeOK && strings.Contains(before, `"allowed":false`) && !strings.Contains(before, `"retry_after_ms":0`),
		"admin: GET /admin/limits/{identity} shows the spent login limit with its Retry-After, and spends nothing")
	check(del == http.StatusNoContent && afterOK && strings.Contains(after, `"allowed":true`) && strings.Contains(after, `"remaining":4`) && login == http.StatusOK,
		"admin: DELETE /admin/limits/{identity} resets it (204): the next login is admitted")
}

// adminPeek returns the login part of GET url's JSON.
func adminPeek(c *http.Client, url string, header ...[2]string) (string, bool) {
	return adminPart(c, url, "login", header...)
}

// metricLines fetches a Prometheus text exposition and returns its
// quotagate_ sample lines.
func metricLines(url string) ([]string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "quotagate_") {
			lines = append(lines, sc.Text())
		}
	}
	return lines, sc.Err()
}

// printMetrics prints the quotagate_ lines of /metrics, leaving out the
// histogram's per-bucket lines (its _sum and _count stay).
func printMetrics(lines []string) {
	fmt.Println("\nGET /metrics of the first server after every request above, the checks' own probes included (quotagate_ lines):")
	omitted := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "quotagate_store_duration_seconds_bucket") {
			omitted++
			continue
		}
		fmt.Println("  " + l)
	}
	if omitted > 0 {
		fmt.Printf("  (%d quotagate_store_duration_seconds_bucket lines omitted)\n", omitted)
	}
}

// requestSeries are the quotagate_requests_total samples.
type requestSeries struct {
	samples  []requestSample
	handlers map[string]float64
}

type requestSample struct {
	bucket, handler, outcome string
	value                    float64
}

// parseRequests reads quotagate_requests_total lines
// (name{bucket="...",handler="...",key_source="...",outcome="..."} value),
// handler labels in limit.NormalizeRoute form.
func parseRequests(lines []string) requestSeries {
	rs := requestSeries{handlers: map[string]float64{}}
	for _, l := range lines {
		if !strings.HasPrefix(l, "quotagate_requests_total{") {
			continue
		}
		end := strings.LastIndexByte(l, '}')
		if end < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(l[end+1:]), &v); err != nil {
			continue
		}
		// The handler label is each router's own spelling ("/v1/notes/{id}",
		// "/v1/notes/:id", "GET /v1/notes/{id}"): compare the engine's
		// normal form, as the buckets do.
		s := requestSample{bucket: label(l, "bucket"), handler: limit.NormalizeRoute(label(l, "handler")), outcome: label(l, "outcome"), value: v}
		rs.samples = append(rs.samples, s)
		rs.handlers[s.handler] += v
	}
	return rs
}

// label returns the value of name="..." in a sample line (values here hold
// no escaped quotes).
func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// globalBucket is the global limit's bucket: its signature (100 per 60 s,
// sliding window, unnamed).
const globalBucket = "100p60"

// sum adds the samples of handler with outcome, in the route's own bucket
// (perRoute: any bucket but the global one) or in the global one.
func (rs requestSeries) sum(handler string, perRoute bool, outcome string) float64 {
	var n float64
	for _, s := range rs.samples {
		if s.handler == handler && s.outcome == outcome && (s.bucket != globalBucket) == perRoute {
			n += s.value
		}
	}
	return n
}

// total adds every sample with outcome.
func (rs requestSeries) total(outcome string) float64 {
	var n float64
	for _, s := range rs.samples {
		if s.outcome == outcome {
			n += s.value
		}
	}
	return n
}

// waitForStart reads the server's start-up line ("... listening on http://ADDR
// ...", or grpc://ADDR) and returns the base URL (for gRPC the address
// alone); the rest of stdout is passed through.
func waitForStart(stdout io.Reader) (string, string, error) {
	type result struct{ base, line string }
	found := make(chan result, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			i := strings.Index(line, "listening on http://")
			if i < 0 {
				i = strings.Index(line, "listening on grpc://")
			}
			if i >= 0 && !sent {
				addr := strings.TrimPrefix(strings.Fields(line[i+len("listening on "):])[0], "grpc://")
				found <- result{addr, line}
				sent = true
				continue
			}
			fmt.Println("server:", line)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case r := <-found:
		return r.base, r.line, nil
	case <-ctx.Done():
		return "", "", errors.New("the server did not print its start-up line within 30 s")
	}
}

func request(c *http.Client, method, url string, header ...[2]string) (int, http.Header, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	for _, h := range header {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, nil
}

// feedMaxWait is the example's MaxWait on GET /v1/feed.
const feedMaxWait = 2 * time.Second

// sendAtOnce sends n GET requests for path from client, all at once (one
// connection each), and returns their row and the time until the last
// answer.
func sendAtOnce(base, route, client, path string, n int) (row, time.Duration) {
	r := row{route: route, client: client, sent: n, retryAfter: "-"}
	c := limittest.ClientFrom(client)
	defer c.CloseIdleConnections()
	type answer struct {
		status int
		h      http.Header
		err    error
	}
	answers := make(chan answer, n)
	start := time.Now()
	for range n {
		go func() {
			status, h, err := request(c, http.MethodGet, base+path)
			answers <- answer{status, h, err}
		}()
	}
	for range n {
		a := <-answers
		switch {
		case a.err != nil:
			r.other++
		case a.status == http.StatusOK:
			r.ok++
		case a.status == http.StatusTooManyRequests:
			r.limited++
			if r.retryAfter == "-" {
				r.retryAfter = a.h.Get("Retry-After") + " s"
			}
		default:
			r.other++
		}
	}
	return r, time.Since(start)
}

// otpBlock shows a block: a client sends wrong codes to POST /v1/otp until
// it is limited (3 failed attempts per 5 s; right codes are free); the
// attempt that finds the quota spent begins an 8 s block, so the right code
// then gets 429 too, with the block's Retry-After. The admin GET shows the
// block, and DELETE lifts it at once: the demo checks the reset instead of
// waiting the block out.
func otpBlock(base string, check func(bool, string)) {
	const client = "127.0.0.40"
	c := limittest.ClientFrom(client)
	defer c.CloseIdleConnections()
	url := base + "/v1/otp"
	right, wrong := [2]string{"X-OTP", "123456"}, [2]string{"X-OTP", "000000"}
	free, _, _ := request(c, "POST", url, right)
	failed, status := 0, 0
	var h http.Header
	for range 8 { // a fixed window may roll during the attempts: more than 3 may fail
		if status, h, _ = request(c, "POST", url, wrong); status != http.StatusUnauthorized {
			break
		}
		failed++
	}
	retry := h.Get("Retry-After")
	blocked, bh, _ := request(c, "POST", url, right)
	ac := limittest.ClientFrom("127.0.0.30")
	defer ac.CloseIdleConnections()
	bearer := [2]string{"Authorization", "Bearer " + adminToken}
	admin := base + "/admin/limits/" + client
	peek, peekOK := adminPart(ac, admin, "otp", bearer)
	del, _, _ := request(ac, "DELETE", admin, bearer)
	after, _, _ := request(c, "POST", url, right)
	fmt.Printf("\nPOST /v1/otp from %s: right code %d; %d wrong codes 401, then %d (Retry-After: %s); the right code while blocked: %d (Retry-After: %s)\n",
		client, free, failed, status, retry, blocked, bh.Get("Retry-After"))
	fmt.Printf("GET /admin/limits/%s: otp %s\nDELETE: %d; POST /v1/otp with the right code: %d\n", client, peek, del, after)
	check(free == http.StatusNoContent && failed >= 3 && status == http.StatusTooManyRequests && retry == "8",
		"otp: right codes are free; after 3 wrong codes the next attempt gets 429 and begins an 8 s block (Retry-After: 8)")
	check(blocked == http.StatusTooManyRequests && bh.Get("Retry-After") != "" && bh.Get("Retry-After") != "0",
		"otp: a blocked client gets 429 even with the right code, with the time left on the block as Retry-After")
	check(peekOK && strings.Contains(peek, `"blocked":true`) && del == http.StatusNoContent && after == http.StatusNoContent,
		"otp: GET /admin/limits/{identity} shows the block; DELETE lifts it (the right code is then 204 at once)")
}

// adminPart returns the limiter name's part of GET url's JSON.
func adminPart(c *http.Client, url, name string, header ...[2]string) (string, bool) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err.Error(), false
	}
	for _, h := range header {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error(), false
	}
	defer resp.Body.Close()
	var body map[string]json.RawMessage
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return fmt.Sprintf("status %d", resp.StatusCode), false
	}
	return string(body[name]), true
}

// sharedSlots shows two example servers on one Redis sharing the 2 slots
// of GET /v1/slow per client: 3 requests to each at once, 2 served in
// all. It starts a redis-server of its own (persistence off, a free
// loopback port) when one is on PATH, and says so when there is none.
func sharedSlots(framework string, check func(bool, string)) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Println("slow: no redis-server on PATH: the two servers sharing one Redis are not shown here (tests/redisstore TestConcurrencyFleetExact shows 3 processes sharing 10 slots)")
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		check(false, "slow: a port for redis-server: "+err.Error())
		return
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	redis := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := redis.Start(); err != nil {
		check(false, "slow: redis-server: "+err.Error())
		return
	}
	defer func() { _ = redis.Process.Kill(); _ = redis.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			check(false, "slow: redis-server did not start on "+addr)
			return
		}
	}
	bin, dir, err := build(framework)
	if err != nil {
		check(false, "slow: "+err.Error())
		return
	}
	defer os.RemoveAll(dir)
	var bases []string
	for range 2 {
		base, _, stop, err := startBin(bin, "", "-redis", "redis://"+addr)
		if err != nil {
			check(false, "slow: a server on Redis: "+err.Error())
			return
		}
		defer stop()
		bases = append(bases, base)
	}
	var rows [2]row
	var wg sync.WaitGroup
	for i, base := range bases {
		wg.Go(func() {
			rows[i], _ = sendAtOnce(base, "GET /v1/slow?ms=1500 (3 at once)", "127.0.0.41", "/v1/slow?ms=1500", 3)
		})
	}
	wg.Wait()
	ok, limited := rows[0].ok+rows[1].ok, rows[0].limited+rows[1].limited
	fmt.Printf("slow on two servers sharing redis %s: server 1 %d x 200 %d x 429, server 2 %d x 200 %d x 429\n",
		addr, rows[0].ok, rows[0].limited, rows[1].ok, rows[1].limited)
	check(ok == 2 && limited == 4, fmt.Sprintf("slow: two servers on one Redis share the 2 slots: %d served, %d refused of 6", ok, limited))
}

// removeDir removes dir, when there is one.
func removeDir(dir string) {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
