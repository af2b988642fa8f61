// Command httppeers measures quotagate's net/http middleware (memory store)
// side by side with peer in-process limiters, in one run with the order
// rotated each round: sethvargo/go-limiter (httplimit, memorystore),
// go-chi/httprate and ulule/limiter (stdlib middleware, memory store), each
// wrapped straight around a handler that answers 200, so that nothing but
// the limiter is measured.
//
// Columns: 1 client address and 100 000, serial and parallel (RunParallel,
// GOMAXPROCS goroutines). Every contender runs on a quota no run can
// exhaust, the allowed path, and has seen every address of its column once
// before it is measured (so that the measurement is of known clients, not of
// the first request of each). Each goroutine reuses one request and sets its
// RemoteAddr from the column's addresses, as a server's request is fresh in
// cache while its client is one of many. quotagate runs twice: at the default
// disclosure (no header on an allowed response) and with the RateLimit
// fields on every response (DiscloseAlways), which the peers send too.
//
// Each cell is the median over the rounds of ns per request, and of
// allocations per request; "x peer" is the fastest peer's ns over the
// contender's in that column. With -heap it also fills each contender with
// 1 000 000 addresses (quotagate: a store sized for 2 000 000) and reports
// the live heap per address after a GC. Benchmarks: ratios inside one run
// count, absolute numbers depend on the machine.
//
//	go run ./httppeers
//	go run ./httppeers -rounds 5 -benchtime 500ms -heap
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-chi/httprate"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/ulule/limiter/v3"
	ululehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulule "github.com/ulule/limiter/v3/drivers/store/memory"
)

// A quota no run can exhaust: the allowed path.
const (
	quota  = 1 << 28
	window = time.Hour
)

// contender builds a fresh middleware; maxKeys sizes a store that takes a
// bound (0: its default).
type contender struct {
	name string
	peer bool
	mw   func(maxKeys int) func(http.Handler) http.Handler
}

func quotagate(d limit.Disclosure) func(int) func(http.Handler) http.Handler {
	return func(maxKeys int) func(http.Handler) http.Handler {
		var opts []memstore.Option
		if maxKeys > 0 {
			opts = append(opts, memstore.WithMaxKeys(maxKeys))
		}
		s, err := memstore.New(opts...)
		if err != nil {
			panic(err)
		}
		l := limittest.MustNew(s, limit.Policy{Limit: quota, Window: window, Disclosure: d})
		return func(next http.Handler) http.Handler { return l.HTTPHandler(next, nil, nil) }
	}
}

func host(r *http.Request) (string, error) {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, nil
	}
	return h, nil
}

var contenders = []contender{
	{"quotagate-default", false, quotagate(limit.DiscloseRetryAfter)},
	{"quotagate-always", false, quotagate(limit.DiscloseAlways)},
	{"sethvargo/go-limiter", true, func(int) func(http.Handler) http.Handler {
		s, err := memorystore.New(&memorystore.Config{Tokens: quota, Interval: window})
		if err != nil {
			panic(err)
		}
		m, err := httplimit.NewMiddleware(s, host)
		if err != nil {
			panic(err)
		}
		return m.Handle
	}},
	{"go-chi/httprate", true, func(int) func(http.Handler) http.Handler {
		return httprate.LimitBy(quota, window, func(r *http.Request) (string, error) {
			h, err := host(r)
			return httprate.CanonicalizeIP(h), err
		})
	}},
	{"ulule/limiter", true, func(int) func(http.Handler) http.Handler {
		l := limiter.New(ulule.NewStore(), limiter.Rate{Period: window, Limit: quota})
		return ululehttp.NewMiddleware(l).Handler
	}},
}

func ok(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

// addrs returns the client addresses of a column.
func addrs(keys int) []string {
	as := make([]string, keys)
	for i := range as {
		as[i] = addr(i)
	}
	return as
}

// request returns a request whose RemoteAddr the caller sets: one per
// goroutine, reused, as a server's request is fresh in cache while its
// client's address is one of many.
func request() *http.Request {
	r, err := http.NewRequest("GET", "/v1/notes/1", nil)
	if err != nil {
		panic(err)
	}
	return r
}

func addr(i int) string {
	return fmt.Sprintf("10.%d.%d.%d:%d", i>>16&255, i>>8&255, i&255, 1024+i%50000)
}

// column is one way of sending requests.
type column struct {
	name     string
	keys     int
	parallel bool
}

var columns = []column{
	{"1 key", 1, false},
	{"100 000 keys", 100_000, false},
	{"1 key parallel", 1, true},
	{"100 000 keys parallel", 100_000, true},
}

// cell is one measurement: wall and process CPU time per request,
// allocations and bytes per request.
type cell struct{ ns, cpuNS, allocs, bytes float64 }

// processCPU is the CPU time this process has used, every thread (the
// garbage collector's included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure serves requests from the addresses as to a fresh middleware of
// c: every address once, then the benchmark.
func measure(c contender, col column, as []string) cell {
	h := c.mw(0)(http.HandlerFunc(ok))
	w := limittest.NewSink()
	r := request()
	for _, a := range as {
		clear(w.H)
		r.RemoteAddr = a
		h.ServeHTTP(w, r)
		if w.Status != http.StatusOK {
			panic(fmt.Sprintf("%s: status %d in the warm-up", c.name, w.Status))
		}
	}
	var res testing.BenchmarkResult
	var cpu time.Duration // of the last (the measured) run
	if col.parallel {
		res = testing.Benchmark(func(b *testing.B) {
			start := processCPU()
			defer func() { cpu = processCPU() - start }()
			var seed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				w, r := limittest.NewSink(), request()
				i := int(seed.Add(7919))
				for pb.Next() {
					clear(w.H)
					r.RemoteAddr = as[i%len(as)]
					h.ServeHTTP(w, r)
					i++
				}
			})
		})
	} else {
		res = testing.Benchmark(func(b *testing.B) {
			start := processCPU()
			defer func() { cpu = processCPU() - start }()
			i := 0
			for b.Loop() {
				clear(w.H)
				r.RemoteAddr = as[i%len(as)]
				h.ServeHTTP(w, r)
				i++
			}
		})
	}
	n := float64(res.N)
	return cell{float64(res.T.Nanoseconds()) / n, float64(cpu.Nanoseconds()) / n, float64(res.MemAllocs) / n, float64(res.MemBytes) / n}
}

// heapPerKey fills a fresh middleware of c with n addresses and returns the
// live heap it holds per address.
func heapPerKey(c contender, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := c.mw(2 * n)(http.HandlerFunc(ok))
	w, r := limittest.NewSink(), request()
	for i := range n {
		clear(w.H)
		r.RemoteAddr = addr(i)
		h.ServeHTTP(w, r)
	}
	r.RemoteAddr = ""
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(h)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func main() {
	rounds := flag.Int("rounds", 5, "rounds; each runs every contender once per column, in rotated order")
	benchtime := flag.Duration("benchtime", 300*time.Millisecond, "duration of one measurement")
	heap := flag.Bool("heap", false, "also measure the live heap per address at 1 000 000 addresses")
	verbose := flag.Bool("v", false, "print every measurement to stderr")
	only := flag.String("only", "", "run only the contenders whose name contains this, and the columns whose name does (comma-separated parts; empty: all)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	testing.Init()
	flag.Parse()
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		panic(err)
	}
	if *only != "" {
		for _, c := range columns {
			columnNames = append(columnNames, c.name)
		}
		contenders = slices.DeleteFunc(contenders, func(c contender) bool { return !matches(*only, c.name) })
		columns = slices.DeleteFunc(columns, func(c column) bool { return !matchesColumn(*only, c.name) })
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
		defer pprof.StopCPUProfile()
	}
	run(os.Stdout, *rounds, *heap, *verbose)
}

// matches reports whether name contains one of the comma-separated parts of
// only that names a contender (a part naming a column is left to
// matchesColumn); no such part matches every name.
func matches(only, name string) bool {
	any := false
	for part := range strings.SplitSeq(only, ",") {
		if isColumn(part) {
			continue
		}
		any = true
		if strings.Contains(name, part) {
			return true
		}
	}
	return !any
}

// matchesColumn is matches for the parts that name a column exactly.
func matchesColumn(only, name string) bool {
	any := false
	for part := range strings.SplitSeq(only, ",") {
		if isColumn(part) {
			any = true
			if part == name {
				return true
			}
		}
	}
	return !any
}

// columnNames are the names of every column, before -only.
var columnNames []string

func isColumn(part string) bool { return slices.Contains(columnNames, part) }

func run(out io.Writer, rounds int, heap, verbose bool) {
	cells := make([][][]cell, len(contenders)) // contender, column, round
	for i := range cells {
		cells[i] = make([][]cell, len(columns))
	}
	for ci, col := range columns {
		as := addrs(col.keys)
		for round := range rounds {
			for k := range contenders {
				i := (k + round) % len(contenders)
				c := measure(contenders[i], col, as)
				if verbose {
					fmt.Fprintf(os.Stderr, "round %d %s %s: %.0f ns %.2f allocs\n", round, col.name, contenders[i].name, c.ns, c.allocs)
				}
				cells[i][ci] = append(cells[i][ci], c)
			}
		}
	}
	fmt.Fprintf(out, "GOMAXPROCS %d, %s, %d rounds; medians per request: wall ns (x fastest peer), process CPU ns (x fastest peer), allocations\n\n",
		runtime.GOMAXPROCS(0), runtime.Version(), rounds)
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprint(tw, "contender\t")
	for _, col := range columns {
		fmt.Fprintf(tw, "%s\t", col.name)
	}
	fmt.Fprintln(tw)
	med := func(i, ci int, f func(cell) float64) float64 {
		var xs []float64
		for _, c := range cells[i][ci] {
			xs = append(xs, f(c))
		}
		return median(xs)
	}
	wall := func(c cell) float64 { return c.ns }
	cpu := func(c cell) float64 { return c.cpuNS }
	fastest := func(ci int, f func(cell) float64) float64 {
		best := 0.0
		for i, c := range contenders {
			if v := med(i, ci, f); c.peer && (best == 0 || v < best) {
				best = v
			}
		}
		return best
	}
	for i, c := range contenders {
		fmt.Fprintf(tw, "%s\t", c.name)
		for ci := range columns {
			ns, cns := med(i, ci, wall), med(i, ci, cpu)
			fmt.Fprintf(tw, "%.0f (%.2fx) %.0f (%.2fx) %.1f\t", ns, fastest(ci, wall)/ns, cns, fastest(ci, cpu)/cns,
				med(i, ci, func(c cell) float64 { return c.allocs }))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for i, c := range contenders {
		if !c.peer && len(columns) == 4 {
			fmt.Fprintf(out, "%s: 100 000 keys / 1 key (serial): wall %.2f, CPU %.2f\n", c.name,
				med(i, 1, wall)/med(i, 0, wall), med(i, 1, cpu)/med(i, 0, cpu))
		}
	}
	if !heap {
		return
	}
	fmt.Fprintln(out, "\nlive heap per address, 1 000 000 addresses (quotagate: store sized for 2 000 000)")
	for _, c := range contenders {
		if c.name == "quotagate-always" {
			continue // the same store as quotagate-default
		}
		fmt.Fprintf(out, "%s: %.1f B\n", c.name, heapPerKey(c, 1_000_000))
	}
}
