package limit_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"github.com/quotagate/quotagate/engine/limitstore"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

var errBackend = errors.New("backend unreachable")

// errStore fails every call, as an unreachable backend does.
var errStore = limittest.FailingStore{Err: errBackend}

// panickingStore panics in every call, as a store with a bug does.
var panickingStore = limittest.FailingStore{Panic: true}

// hangStore blocks until its context ends, as a backend that stopped
// answering does.
var hangStore = limittest.SlowStore{}

// The default bodies of a 429 and of FailClosed's 503 (RFC 9457).
const (
	body429Default = `{"type":"about:blank","title":"Too Many Requests","status":429}`
	body503        = `{"type":"about:blank","title":"Service Unavailable","status":503}`
)

// epochMS is the tests' fixed instant: 2026-01-01T00:00:10.500Z.
var epochMS = time.Date(2026, 1, 1, 0, 0, 10, 500_000_000, time.UTC).UnixMilli()

// clockStore is a reference store with the fake clock it decides at.
type clockStore struct {
	*limittest.Store
	clock *limittest.Clock
}

// storeAt returns an empty reference store whose clock reads ms (Unix ms).
func storeAt(ms int64) *clockStore {
	c := limittest.NewClock(time.UnixMilli(ms))
	return &clockStore{limittest.NewStore(c.Now), c}
}

// advance moves the store's clock by ms milliseconds.
func (s *clockStore) advance(ms int64) { s.clock.Advance(time.Duration(ms) * time.Millisecond) }

// now returns the store's clock reading, Unix ms.
func (s *clockStore) now() int64 { return s.clock.Now().UnixMilli() }

// set sets the store's clock to ms (Unix ms).
func (s *clockStore) set(ms int64) { s.clock.Set(time.UnixMilli(ms)) }

// response is what Check wrote for one request, with its Decision.
type response struct {
	Decision limit.Decision
	Status   int // the status of a limited response; 0 when the request proceeds
	Body     []byte
	Header   http.Header
}

// Denied reports whether the engine wrote a limited response.
func (r response) Denied() bool { return r.Status != 0 }

// field is one header line.
type field struct{ Name, Value string }

// Fields returns the header lines written, sorted by name.
func (r response) Fields() []field {
	var fs []field
	for name, vs := range r.Header {
		for _, v := range vs {
			fs = append(fs, field{name, v})
		}
	}
	slices.SortStableFunc(fs, func(a, b field) int { return strings.Compare(a.Name, b.Name) })
	return fs
}

// check decides r with l through the generic seam (Limiter.Check) into a
// recording ResponseWriter.
func check(l *limit.Limiter, ctx context.Context, r limit.Request) response {
	w := limittest.NewWriter()
	d := l.Check(ctx, r, w)
	return response{Decision: d, Status: w.Status, Body: w.Body, Header: w.Header}
}

// checkHTTP decides r with l through the engine's net/http path
// (CheckHTTP) and returns what it wrote.
func checkHTTP(l *limit.Limiter, r limit.Request) *httptest.ResponseRecorder {
	hr := httptest.NewRequest(cmp.Or(r.Method, http.MethodGet), "/", nil)
	hr.URL.Path = cmp.Or(r.Path, "/")
	hr.RemoteAddr = r.Peer
	if h, ok := r.Header.(http.Header); ok {
		hr.Header = h
	}
	w := httptest.NewRecorder()
	l.CheckHTTP(w, hr, limit.Request{Route: r.Route, Unmatched: r.Unmatched})
	return w
}

// stack decides r with each limiter in turn into one response, as stacked
// mounts (a global and a per-route one) on one request do, and returns the
// header fields written and the Decisions.
func stack(r limit.Request, ls ...*limit.Limiter) (http.Header, []limit.Decision) {
	w := limittest.NewWriter()
	var ds []limit.Decision
	for _, l := range ls {
		ds = append(ds, l.Check(context.Background(), r, w))
	}
	return w.Header, ds
}

// req is a request from one socket peer.
func req(peer, path string) limit.Request {
	return limit.Request{Method: http.MethodGet, Path: path, Route: path, Peer: peer}
}

func mustNew(t testing.TB, s limitstore.Store, p limit.Policy, opts ...limit.Option) *limit.Limiter {
	t.Helper()
	l, err := limit.New(s, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// headerOf builds an http.Header from "Name: value" lines, in order; each
// element is one header line.
func headerOf(lines ...string) http.Header {
	if len(lines) == 0 {
		return nil
	}
	h := http.Header{}
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ": ")
		if !ok {
			name, value, _ = strings.Cut(l, ":")
		}
		h.Add(name, value)
	}
	return h
}

// issuesOf returns the issues a Recorder saw, in order.
func issuesOf(rec *limittest.Recorder) []limit.Issue {
	var out []limit.Issue
	for _, e := range rec.Events() {
		if rest, ok := strings.CutPrefix(e, "issue "); ok {
			out = append(out, limit.Issue(rest[strings.LastIndexByte(rest, '|')+1:]))
		}
	}
	return out
}

// keySources returns the key sources of a Recorder's decisions, in order.
func keySources(rec *limittest.Recorder) []limit.KeySource {
	var out []limit.KeySource
	for _, d := range rec.Decisions() {
		out = append(out, d.KeySource)
	}
	return out
}

// checkKeySources fails t unless every decision rec holds took its key from
// source want.
func checkKeySources(t testing.TB, rec *limittest.Recorder, want limit.KeySource) {
	t.Helper()
	for i, s := range keySources(rec) {
		if s != want {
			t.Fatalf("decision %d: KeySource %s, want %s", i, s, want)
		}
	}
}

// deriveIdentity runs the identity derivation of a Limiter built with opts
// and policy p for one request and returns the key source, the identity's
// key form ("r:..." or "h:...") and the issues reported.
func deriveIdentity(t testing.TB, p limit.Policy, opts []limit.Option, peer string, h http.Header) (limit.KeySource, string, []limit.Issue) {
	t.Helper()
	rec := &limittest.Recorder{}
	l := mustNew(t, limittest.NewStore(nil), p, append(append([]limit.Option(nil), opts...), limit.WithObserver(rec))...)
	var hdr limit.Header
	if h != nil {
		hdr = h
	}
	src, id := limit.Identify(l, limit.Request{Peer: peer, Header: hdr})
	return src, id, issuesOf(rec)
}

// assertNoAllocs fails t unless f, run many times, allocates nothing beyond
// the refills of l's scratch pool: sync.Pool drops items at random under
// -race and a GC may empty it, and each refill allocates
// limit.ScratchObjects objects, so the guard counts exactly (process-wide
// mallocs, minus the refills it observed) and holds with or without -race.
// Without -race it also asks testing.AllocsPerRun for exactly 0.
func assertNoAllocs(t *testing.T, l *limit.Limiter, f func()) {
	t.Helper()
	refills := limit.CountScratchRefills(l)
	f() // warm: the store entry, the route cache, the pool
	if !limittest.RaceEnabled {
		if a := testing.AllocsPerRun(1000, f); a != 0 {
			t.Fatalf("%v allocations per call, want 0", a)
		}
	}
	// Allocations beyond the pool refills must stay far below one per call
	// (the process allocates a little in the background: timers, the testing
	// framework; an allocation per call would count 2000 here). Under -race
	// the runtime allocates more on its own (26 in one run on a loaded
	// machine, with sync.Pool dropping a quarter of its items), so the bound
	// is 5% of the calls there, 1% otherwise; the exact 0 above runs without
	// -race (scripts/test.sh's allocation-guard pass).
	const runs = 2000
	bound := int64(runs / 100)
	if limittest.RaceEnabled {
		bound = runs / 20
	}
	var before, after runtime.MemStats
	refills.Store(0)
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	if extra := int64(after.Mallocs-before.Mallocs) - limit.ScratchObjects*refills.Load(); extra >= bound {
		t.Fatalf("%d allocations in %d calls beyond %d scratch refills: the path allocates", extra, runs, refills.Load())
	}
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
