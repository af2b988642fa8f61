// Command redispeers measures quotagate's Redis store side by side with peer
// Redis rate limiters, in one run with the order rotated each
// round: a trivial EVALSHA (the ceiling of one script call through rueidis),
// rueidislimiter, ulule/limiter with its Redis store, go-redis/redis_rate,
// and quotagate through Store.Take and through Limiter.Check, each algorithm.
//
// It starts its own redis-server (persistence off) on a free loopback port
// and stops it by PID. For each contender and goroutine count it reports
// decisions/s over 10 000 identities on the allowed path (a quota no run can
// exhaust), each measurement on a Redis holding only its contender's keys
// (FLUSHALL, then a warm-up); Redis microseconds per decision from INFO commandstats (the
// script commands' time, which includes the commands a script runs) and the
// server process's CPU per decision from /proc, and this process's (getrusage:
// the client's share of cores it may share with Redis); client allocations per
// decision (runtime.MemStats.Mallocs, the whole process: the harness adds
// none per call); and Redis commands per decision (every command
// commandstats counts, the script's own included). Then a single-hot-key
// flood: limit 10 per minute, 64 goroutines, nearly every request denied.
// Each cell is the median over the rounds. Benchmarks: ratios inside one run
// count, absolute numbers depend on the machine.
//
//	go run ./redispeers            (make bench runs it)
//	go run ./redispeers -rounds 5 -dur 3s -goroutines 64,256
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	redisstore "github.com/quotagate/quotagate/stores/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// config is what one run measures.
type config struct {
	rounds     int
	dur        time.Duration
	goroutines []int
	keys       int
	flood      bool
	only       string // substring filter on contender names
	verbose    bool   // print every measurement to stderr
}

func main() {
	var cfg config
	var gs string
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds; each runs every contender once, in rotated order")
	flag.DurationVar(&cfg.dur, "dur", 2*time.Second, "duration of one contender's run")
	flag.StringVar(&gs, "goroutines", "64,256", "goroutine counts, comma-separated")
	flag.IntVar(&cfg.keys, "keys", 10_000, "identities on the allowed path")
	flag.BoolVar(&cfg.flood, "flood", true, "also run the single-hot-key flood")
	flag.StringVar(&cfg.only, "only", "", "run only contenders whose name contains this (and the ceiling)")
	flag.BoolVar(&cfg.verbose, "v", false, "print every measurement (round, contender, goroutines, decisions/s) to stderr")
	flag.Parse()
	for _, g := range strings.Split(gs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "redispeers: -goroutines %q: want positive integers\n", gs)
			os.Exit(2)
		}
		cfg.goroutines = append(cfg.goroutines, n)
	}
	if err := run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "redispeers:", err)
		os.Exit(1)
	}
}

// measurement is one contender's run.
type measurement struct {
	decisions, allowed int64
	elapsed            time.Duration
	redisUsec          int64         // script commands' usec (INFO commandstats)
	redisCPU           time.Duration // the server process's user+system time
	clientCPU          time.Duration // this process's user+system time
	commands           int64         // every command counted, harness excluded
	scriptCalls        int64         // EVAL/EVALSHA calls
	writes             int64         // SET and SETRANGE calls (quotagate's state writes)
	deadlines          int64         // the TTL repair's PTTL, PEXPIREAT and PEXPIRE calls (a write in place asks PTTL; a key without a deadline gets one)
	mallocs            uint64
}

func (m measurement) perDecision(v float64) float64 {
	if m.decisions == 0 {
		return 0
	}
	return v / float64(m.decisions)
}

// row is one table row: the measurements of every round.
type row struct {
	name string
	g    int
	ms   []measurement
}

// median of f over the row's measurements.
func (r *row) median(f func(m measurement) float64) float64 {
	v := make([]float64, len(r.ms))
	for i, m := range r.ms {
		v[i] = f(m)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// results are one run's rows: the allowed path, then the flood.
type results struct {
	header  string
	allowed []*row
	flood   []*row
}

func run(w io.Writer, cfg config) error {
	res, err := measureAll(cfg)
	if err != nil {
		return err
	}
	res.print(w)
	return nil
}

// measureAll starts the server and the clients, sets every contender up
// and measures them, rotating the order each round.
func measureAll(cfg config) (*results, error) {
	bin, err := redisBin()
	if err != nil {
		return nil, fmt.Errorf("no redis-server (set QUOTAGATE_REDIS_SERVER_BIN or put it on PATH): %w", err)
	}
	srv, err := startServer(bin)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	opt, err := redisstore.ParseURL("redis://" + srv.addr)
	if err != nil {
		return nil, err
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	gr := goredis.NewClient(&goredis.Options{Addr: srv.addr})
	defer gr.Close()
	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	cl := &clients{rueidis: rc, goredis: gr}

	var cs []contender
	for _, c := range contenders() {
		// The ceiling always runs: every ratio is to it.
		if strings.Contains(c.name, cfg.only) || strings.HasPrefix(c.name, "trivial") {
			cs = append(cs, c)
		}
	}
	res := &results{header: fmt.Sprintf("redis-server %s on %s; GOMAXPROCS %d; %d identities; %d rounds of %v per contender, order rotated",
		serverVersion(admin), srv.addr, runtime.GOMAXPROCS(0), cfg.keys, cfg.rounds, cfg.dur)}

	ids := identities(cfg.keys)
	const huge = 1 << 30 // a quota no run exhausts: the allowed path
	rows := map[string]*row{}
	fns := make([]decideFunc, len(cs))
	for i, c := range cs {
		if fns[i], err = c.setup(cl, fmt.Sprintf("b%d", i), huge, ids); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		for _, g := range cfg.goroutines {
			r := &row{name: c.name, g: g}
			rows[key(c.name, g)] = r
			res.allowed = append(res.allowed, r)
		}
	}
	// Warm up: scripts loaded, connections dialled, keys created.
	for i := range cs {
		if _, err := measure(srv, admin, fns[i], 64, min(cfg.dur, 300*time.Millisecond)); err != nil {
			return nil, fmt.Errorf("%s: %w", cs[i].name, err)
		}
	}
	for r := range cfg.rounds {
		for k := range cs {
			i := (k + r) % len(cs)
			for _, g := range cfg.goroutines {
				// Over its own 10 000 keys: the data set of every
				// measurement is the same, whichever contenders the run
				// holds (the others' keys would grow Redis's dictionaries,
				// and with them the cost of every key lookup).
				if err := admin.Do(context.Background(), admin.B().Flushall().Sync().Build()).Error(); err != nil {
					return nil, err
				}
				if _, err := measure(srv, admin, fns[i], 64, min(cfg.dur, 300*time.Millisecond)); err != nil {
					return nil, fmt.Errorf("%s: %w", cs[i].name, err)
				}
				m, err := measure(srv, admin, fns[i], g, cfg.dur)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", cs[i].name, err)
				}
				rows[key(cs[i].name, g)].ms = append(rows[key(cs[i].name, g)].ms, m)
				if cfg.verbose {
					fmt.Fprintf(os.Stderr, "round %d\t%s\t%d\t%.0f\n", r, cs[i].name, g, rate(m))
				}
			}
		}
	}
	if !cfg.flood {
		return res, nil
	}
	// The flood: one identity, limit 10 per minute, 64 goroutines; nearly
	// every request is denied.
	const g = 64
	ffns := make([]decideFunc, len(cs))
	frows := make([]*row, len(cs))
	for i, c := range cs {
		if strings.HasPrefix(c.name, "trivial") {
			continue
		}
		if ffns[i], err = c.setup(cl, fmt.Sprintf("f%d", i), 10, []string{"hot"}); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		frows[i] = &row{name: c.name, g: g}
		res.flood = append(res.flood, frows[i])
	}
	for r := range cfg.rounds {
		for k := range cs {
			i := (k + r) % len(cs)
			if ffns[i] == nil {
				continue
			}
			m, err := measure(srv, admin, ffns[i], g, cfg.dur)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cs[i].name, err)
			}
			frows[i].ms = append(frows[i].ms, m)
		}
	}
	return res, nil
}

// print writes the tables.
func (res *results) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nAllowed path (median of the rounds):\n", res.header)
	ceiling := map[int]float64{}
	for _, r := range res.allowed {
		if strings.HasPrefix(r.name, "trivial") {
			ceiling[r.g] = r.median(rate)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "contender\tgoroutines\tdecisions/s\tof ceiling\tRedis usec/decision (commandstats)\tRedis CPU usec/decision (process)\tclient CPU usec/decision\tallocs/decision\tcommands/decision\tallowed\t")
	for _, r := range res.allowed {
		dps := r.median(rate)
		of := "-"
		if c := ceiling[r.g]; c > 0 {
			of = fmt.Sprintf("%.2f", dps/c)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t%.2f\t%.3f\t\n", r.name, r.g, dps, of,
			r.median(redisUsec), r.median(redisCPU), r.median(clientCPU), r.median(allocs), r.median(commands), r.median(allowedShare))
	}
	tw.Flush()
	if len(res.flood) == 0 {
		return
	}
	fmt.Fprintf(w, "\nSingle hot key flood: limit 10 per minute, %d goroutines (median of the rounds):\n", res.flood[0].g)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "contender\tdecisions/s\tdenied share\tRedis calls/decision\tRedis usec/decision\tallocs/decision\tcommands/decision\t")
	for _, r := range res.flood {
		fmt.Fprintf(tw, "%s\t%.0f\t%.4f\t%.3f\t%.2f\t%.1f\t%.2f\t\n", r.name, r.median(rate),
			1-r.median(allowedShare), r.median(scriptCalls), r.median(redisUsec), r.median(allocs), r.median(commands))
	}
	tw.Flush()
}

// Per-decision figures of a measurement.
func redisUsec(m measurement) float64 { return m.perDecision(float64(m.redisUsec)) }
func redisCPU(m measurement) float64  { return m.perDecision(float64(m.redisCPU.Microseconds())) }
func clientCPU(m measurement) float64 { return m.perDecision(float64(m.clientCPU.Microseconds())) }

// ownCPU is this process's user+system CPU time (getrusage): on a machine
// whose cores the client and Redis share, the client's CPU per decision is
// what Redis cannot have.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
func allocs(m measurement) float64       { return m.perDecision(float64(m.mallocs)) }
func commands(m measurement) float64     { return m.perDecision(float64(m.commands)) }
func allowedShare(m measurement) float64 { return m.perDecision(float64(m.allowed)) }
func scriptCalls(m measurement) float64  { return m.perDecision(float64(m.scriptCalls)) }

func key(name string, g int) string { return name + "/" + strconv.Itoa(g) }

func rate(m measurement) float64 { return float64(m.decisions) / m.elapsed.Seconds() }

// measure runs f from g goroutines for d and collects the numbers.
func measure(srv *server, admin rueidis.Client, f decideFunc, g int, d time.Duration) (measurement, error) {
	ctx := context.Background()
	var m measurement
	if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
		return m, err
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, err := srv.cpu()
	if err != nil {
		return m, err
	}
	own0 := ownCPU()
	var decisions, allowed atomic.Int64
	var next atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			// Each goroutine walks the identities from its own offset.
			i := int(next.Add(1)) * 7919
			var n, ok int64
			defer func() { decisions.Add(n); allowed.Add(ok) }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i++
				a, err := f(ctx, i)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n++
				if a {
					ok++
				}
			}
		})
	}
	time.Sleep(d) // the run's length, not a wait for a condition
	close(stop)
	wg.Wait()
	m.elapsed = time.Since(start)
	m.clientCPU = ownCPU() - own0
	runtime.ReadMemStats(&after)
	cpu1, err := srv.cpu()
	if err != nil {
		return m, err
	}
	if e := firstErr.Load(); e != nil {
		return m, e.(error)
	}
	stats, err := commandStats(ctx, admin)
	if err != nil {
		return m, err
	}
	m.decisions, m.allowed = decisions.Load(), allowed.Load()
	m.mallocs = after.Mallocs - before.Mallocs
	m.redisCPU = cpu1 - cpu0
	var other int64
	for cmd, st := range stats {
		if harnessCommands[cmd] {
			continue
		}
		m.commands += st.calls
		if cmd == "set" || cmd == "setrange" {
			m.writes += st.calls
		}
		if cmd == "pttl" || cmd == "pexpireat" || cmd == "pexpire" {
			m.deadlines += st.calls
		}
		if scriptCommands[cmd] {
			m.redisUsec += st.usec
			m.scriptCalls += st.calls
		} else {
			other += st.usec
		}
	}
	if m.scriptCalls == 0 {
		m.redisUsec = other
	}
	return m, nil
}

func serverVersion(c rueidis.Client) string {
	info, err := c.Do(context.Background(), c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
