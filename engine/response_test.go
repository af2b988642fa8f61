package limit

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func fieldNames(resp Response) []string {
	var names []string
	for _, f := range resp.Fields() {
		names = append(names, f.Name)
	}
	return names
}

// Each disclosure level sends a superset of the one before, and disclosure
// never changes enforcement: the same traffic gets the same decisions and
// leaves the same store state at every level.
func TestDisclosureLevelsNestAndNeverChangeEnforcement(t *testing.T) {
	levels := []Disclosure{DiscloseNone, DiscloseRetryAfter, DiscloseOnLimit, DiscloseAlways}
	var prevAllowed, prevDenied []string
	var prevDecisions []Decision
	for _, lv := range levels {
		store := newMapStore(epochMS)
		l := mustNew(t, store, Policy{Limit: 3, Window: time.Minute, Disclosure: lv, HeaderStyle: HeadersIETF | HeadersTriplet | HeadersLegacy})
		var allowed, denied []string
		var decisions []Decision
		for i := 0; i < 5; i++ {
			resp := l.Check(context.Background(), req("192.0.2.1:1000", "/x"))
			d := resp.Decision
			d.Policy = nil
			decisions = append(decisions, d)
			if resp.Denied() {
				denied = fieldNames(resp)
			} else {
				allowed = fieldNames(resp)
			}
		}
		for _, n := range prevAllowed {
			if !slices.Contains(allowed, n) {
				t.Fatalf("%v: allowed response lacks %s that the lower level sends", lv, n)
			}
		}
		for _, n := range prevDenied {
			if !slices.Contains(denied, n) {
				t.Fatalf("%v: denial lacks %s that the lower level sends", lv, n)
			}
		}
		if prevDecisions != nil && !slices.Equal(decisions, prevDecisions) {
			t.Fatalf("%v: decisions differ from the lower level:\n%+v\n%+v", lv, decisions, prevDecisions)
		}
		prevAllowed, prevDenied, prevDecisions = allowed, denied, decisions
	}
	if len(prevAllowed) != 8 || len(prevDenied) != 11 {
		t.Fatalf("Always with every style: allowed %v, denied %v", prevAllowed, prevDenied)
	}
}

// Policy names with quotes and backslashes are escaped as RFC 9651 strings
// and parse back to the same name, in every RateLimit field and in mount
// order when two limiters speak.
func TestPolicyNamesParseBackAsStructuredFields(t *testing.T) {
	names := []string{`plain`, `a "quoted" name`, `back\slash`, `\"`, `"`, `\\`, `trailing\`, `sp ace;q=1,x`}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 300; i++ {
		b := make([]byte, 1+rng.IntN(20))
		for j := range b {
			b[j] = byte(0x20 + rng.IntN(0x7f-0x20))
			if b[j] == ':' {
				b[j] = '\\'
			}
		}
		if strings.TrimSpace(string(b)) != "" {
			names = append(names, string(b))
		}
	}
	store := newMapStore(epochMS)
	for i, name := range names {
		global := mustNew(t, store, Policy{Name: name, Limit: 10, Window: time.Minute, Disclosure: DiscloseAlways})
		route := mustNew(t, store, Policy{Name: name + "2", Limit: 5, Window: 90 * time.Second, Disclosure: DiscloseAlways})
		h := http.Header{}
		peer := "192.0.2." + strconv.Itoa(1+i%250) + ":1"
		r1 := global.Check(context.Background(), req(peer, "/"))
		r1.WriteHeaders(h)
		r2 := route.Check(context.Background(), req(peer, "/"))
		r2.WriteHeaders(h)

		pol, err := parseSFList(h.Values("Ratelimit-Policy"))
		if err != nil {
			t.Fatalf("name %q: RateLimit-Policy %q: %v", name, h.Values("Ratelimit-Policy"), err)
		}
		lim, err := parseSFList(h.Values("Ratelimit"))
		if err != nil {
			t.Fatalf("name %q: RateLimit %q: %v", name, h.Values("Ratelimit"), err)
		}
		if len(pol) != 2 || len(lim) != 2 {
			t.Fatalf("name %q: want two members each, got %v and %v", name, pol, lim)
		}
		wantQ, wantW, wantR := []int64{10, 5}, []int64{60, 90}, []int64{r1.Decision.Remaining, r2.Decision.Remaining}
		for k, wantName := range []string{name, name + "2"} {
			if pol[k].Value != wantName || lim[k].Value != wantName {
				t.Fatalf("member %d: names %#v / %#v, want %q (mount order)", k, pol[k].Value, lim[k].Value, wantName)
			}
			if q, _ := pol[k].param("q"); q != wantQ[k] {
				t.Fatalf("member %d: q=%v, want %d", k, q, wantQ[k])
			}
			if w, _ := pol[k].param("w"); w != wantW[k] {
				t.Fatalf("member %d: w=%v, want %d", k, w, wantW[k])
			}
			if r, _ := lim[k].param("r"); r != wantR[k] {
				t.Fatalf("member %d: r=%v, want %d", k, r, wantR[k])
			}
			if tt, ok := lim[k].param("t"); !ok || tt.(int64) < 0 {
				t.Fatalf("member %d: t=%v", k, tt)
			}
		}
	}
}

// With IETF and Triplet combined, RateLimit-Policy stays a valid -10 list
// (string members only); Triplet's own values are in the other three fields.
func TestCombinedStylesKeepRateLimitPolicyValid(t *testing.T) {
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 10, Window: time.Minute, Disclosure: DiscloseAlways, HeaderStyle: HeadersIETF | HeadersTriplet})
	h := responseHeader(l.Check(context.Background(), req("192.0.2.1:1", "/")))
	pol, err := parseSFList(h.Values("Ratelimit-Policy"))
	if err != nil || len(pol) != 1 || pol[0].Value != "10p60" {
		t.Fatalf("RateLimit-Policy %q: %v %v", h.Values("Ratelimit-Policy"), pol, err)
	}
	for _, name := range []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"} {
		if _, err := parseSFItem(h.Get(name)); err != nil || len(h.Values(name)) != 1 {
			t.Fatalf("%s %q: %v", name, h.Values(name), err)
		}
	}
	only := mustNew(t, newMapStore(epochMS), Policy{Limit: 10, Window: time.Minute, Disclosure: DiscloseAlways, HeaderStyle: HeadersTriplet})
	h = responseHeader(only.Check(context.Background(), req("192.0.2.1:1", "/")))
	pol, err = parseSFList(h.Values("Ratelimit-Policy"))
	if err != nil || len(pol) != 1 || pol[0].Value != int64(10) {
		t.Fatalf("Triplet RateLimit-Policy %q: %v %v", h.Values("Ratelimit-Policy"), pol, err)
	}
	if w, _ := pol[0].param("w"); w != int64(60) {
		t.Fatalf("Triplet RateLimit-Policy w=%v", w)
	}
}

// Two limiters on one request: list fields accumulate in mount order; the
// single-value Triplet and Legacy fields carry the limiter closer to
// exhaustion, whichever mount it is.
func TestTwoLimitersMergeHeaders(t *testing.T) {
	all := HeadersIETF | HeadersTriplet | HeadersLegacy
	store := newMapStore(epochMS)
	global := mustNew(t, store, Policy{Name: "global", Limit: 100, Window: time.Minute, AlignWindows: true, Algorithm: FixedWindow, Disclosure: DiscloseAlways, HeaderStyle: all})
	login := mustNew(t, store, Policy{Name: "login", Limit: 5, Window: 10 * time.Second, AlignWindows: true, Algorithm: FixedWindow, Disclosure: DiscloseAlways, HeaderStyle: all})
	for _, order := range [][]*Limiter{{global, login}, {login, global}} {
		store.reset()
		h := http.Header{}
		for _, l := range order {
			resp := l.Check(context.Background(), req("192.0.2.9:1", "/login"))
			resp.WriteHeaders(h)
		}
		first, second := order[0].Policy().Name, order[1].Policy().Name
		if got, want := h.Values("Ratelimit-Policy"), []string{`"` + first + `";q=` + order[0].headers.limit + ";w=" + strconv.FormatInt(order[0].headers.windowS, 10), `"` + second + `";q=` + order[1].headers.limit + ";w=" + strconv.FormatInt(order[1].headers.windowS, 10)}; !slices.Equal(got, want) {
			t.Fatalf("RateLimit-Policy %q, want %q", got, want)
		}
		if got := h.Values("Ratelimit"); len(got) != 2 || !strings.HasPrefix(got[0], `"`+first+`"`) || !strings.HasPrefix(got[1], `"`+second+`"`) {
			t.Fatalf("RateLimit %q, want both members in mount order", got)
		}
		// login (4 of 5 left, reset in 10 s - 0.5 s) is closer to exhaustion
		// than global (99 of 100) in either order.
		want := map[string]string{
			"Ratelimit-Limit": "5", "Ratelimit-Remaining": "4", "Ratelimit-Reset": "10",
			"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": strconv.FormatInt(epochMS/1000+10, 10),
		}
		for name, v := range want {
			if got := h.Values(name); len(got) != 1 || got[0] != v {
				t.Fatalf("%s then %s: %s %q, want exactly %q", first, second, name, got, v)
			}
		}
	}
	// Equal Remaining: the later reset wins.
	a := mustNew(t, store, Policy{Name: "a", Limit: 5, Window: 10 * time.Second, AlignWindows: true, Algorithm: FixedWindow, Disclosure: DiscloseAlways, HeaderStyle: HeadersTriplet})
	b := mustNew(t, store, Policy{Name: "b", Limit: 5, Window: 60 * time.Second, AlignWindows: true, Algorithm: FixedWindow, Disclosure: DiscloseAlways, HeaderStyle: HeadersTriplet})
	h := http.Header{}
	ra := a.Check(context.Background(), req("192.0.2.9:1", "/"))
	ra.WriteHeaders(h)
	rb := b.Check(context.Background(), req("192.0.2.9:1", "/"))
	rb.WriteHeaders(h)
	if h.Get("Ratelimit-Reset") != "50" || h.Get("Ratelimit-Remaining") != "4" {
		t.Fatalf("equal remaining: %v, want b's later reset 50", h)
	}
	if got := h.Values("Ratelimit-Policy"); !slices.Equal(got, []string{"5;w=10", "5;w=60"}) {
		t.Fatalf("Triplet RateLimit-Policy list %q", got)
	}
}

func TestProblemType(t *testing.T) {
	valid := []string{"", "about:blank", ProblemTypeQuotaExceeded, "/problems/rate-limit", "urn:example:quota", "https://example.com/p?x=1&y=%41#frag", "tag:example.com,2026:quota"}
	for _, typ := range valid {
		l, err := New(newMapStore(epochMS), Policy{Limit: 1, ProblemType: typ})
		if err != nil {
			t.Fatalf("ProblemType %q: %v", typ, err)
		}
		l.Check(context.Background(), req("192.0.2.1:1", "/"))
		resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
		var body struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Status int    `json:"status"`
		}
		dec := json.NewDecoder(strings.NewReader(string(resp.Body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			t.Fatalf("ProblemType %q: body %s: %v", typ, resp.Body, err)
		}
		want := typ
		if want == "" {
			want = "about:blank"
		}
		if body.Type != want || body.Title != "Too Many Requests" || body.Status != 429 {
			t.Fatalf("ProblemType %q: body %s", typ, resp.Body)
		}
	}
	if got := string(problemBody("", 429)); got != `{"type":"about:blank","title":"Too Many Requests","status":429}` {
		t.Fatalf("default body %s", got)
	}
	if got := string(problemBody(ProblemTypeQuotaExceeded, 429)); got != `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}` {
		t.Fatalf("quota-exceeded body %s", got)
	}
	invalid := []string{"a b", `a"b`, `a\b`, "<x>", "caf\xc3\xa9", "%4", "%zz", "x\n", "{a}", "a|b", "http://[::1"}
	for _, typ := range invalid {
		_, err := New(newMapStore(epochMS), Policy{ProblemType: typ})
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "ProblemType") {
			t.Fatalf("ProblemType %q: err %v, want ErrInvalidPolicy naming ProblemType", typ, err)
		}
	}
}

// The default bodies say nothing about the limit, the delay, the client or
// any error.
func TestDefaultBodiesDiscloseNothing(t *testing.T) {
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 7, Window: 13 * time.Second})
	var resp Response
	for i := 0; i < 8; i++ {
		resp = l.Check(context.Background(), req("203.0.113.77:5555", "/"))
	}
	closed := mustNew(t, errStore, Policy{Limit: 7, Window: 13 * time.Second, FailureMode: FailClosed})
	resp503 := closed.Check(context.Background(), req("203.0.113.77:5555", "/"))
	for _, r := range []Response{resp, resp503} {
		body := string(r.Body)
		for _, leak := range []string{"7", "13", "203.0.113", "5555", "backend", "7p13"} {
			if strings.Contains(body, leak) {
				t.Fatalf("body %s contains %q", body, leak)
			}
		}
	}
	if string(resp503.Body) != `{"type":"about:blank","title":"Service Unavailable","status":503}` || resp503.Status != 503 {
		t.Fatalf("FailClosed: %d %s", resp503.Status, resp503.Body)
	}
}

func TestWriteDenial(t *testing.T) {
	l := mustNew(t, newMapStore(epochMS), Policy{Limit: 1})
	ok := l.Check(context.Background(), req("192.0.2.1:1", "/"))
	w := httptest.NewRecorder()
	ok.WriteDenial(w)
	if w.Code != 200 || len(w.Header()) != 0 || w.Body.Len() != 0 {
		t.Fatal("WriteDenial wrote an allowed response")
	}
	denied := l.Check(context.Background(), req("192.0.2.1:1", "/"))
	w = httptest.NewRecorder()
	denied.WriteDenial(w)
	if w.Code != 429 || w.Body.String() != string(denied.Body) || w.Header().Get("Content-Length") != strconv.Itoa(len(denied.Body)) {
		t.Fatalf("WriteDenial: %d %v %q", w.Code, w.Header(), w.Body)
	}
}

// propStore applies a random State chosen by gen for the Op it is given, and
// keeps the Op and State so that the test can replay the decision later.
type propStore struct {
	now int64
	gen func(q *Quota, now int64) State
	op  Op
	st  State
}

func (s *propStore) Take(_ context.Context, op *Op) (Result, error) {
	s.op = *op
	s.op.Quotas[0].Key = nil
	s.st = s.gen(&op.Quotas[0], s.now)
	_, res := applyOne(op, s.st, s.now)
	return Result{Allowed: res.Allowed, NowMS: s.now, N: 1, Quotas: [MaxQuotas]QuotaResult{res}}, nil
}

func (s *propStore) InProcess() {}

// Property: over random states of all three algorithms, Retry-After is at
// least 1, equals the t (and Triplet Reset) it accompanies, and the same
// request is admitted when it says, but not a whole second later than needed;
// the Legacy epoch Reset is the exact admission instant rounded up.
func TestRetryAfterPropertyOverRandomStates(t *testing.T) {
	const runs = 20_000
	rng := rand.New(rand.NewPCG(2026, 4))
	windows := []int64{1000, 1500, 7000, 10_000, 60_000, 3_600_000}
	var denials [3]int
	for i := 0; i < runs; i++ {
		alg := Algorithm(rng.IntN(3))
		limit := 1 + rng.Int64N(50)
		w := windows[rng.IntN(len(windows))]
		p := Policy{Algorithm: alg, Limit: limit, Window: time.Duration(w) * time.Millisecond, Disclosure: DiscloseAlways,
			HeaderStyle: HeadersIETF | HeadersTriplet | HeadersLegacy, AlignWindows: rng.IntN(2) == 0}
		capacity := limit
		if alg == TokenBucket {
			p.Window = time.Duration(limit*(1+rng.Int64N(2000))) * time.Millisecond
			p.Burst = 1 + rng.Int64N(2*limit)
			capacity = p.Burst
		}
		cost := 1 + rng.Int64N(capacity)
		p.CostFunc = func(Request) int64 { return cost }
		store := &propStore{now: 1_700_000_000_000 + rng.Int64N(1_000_000_000)}
		store.gen = func(op *Quota, now int64) State {
			if op.Algorithm == TokenBucket {
				// TAT - now in units of 1/Limit ms, from a bucket full for
				// a while to an empty one (no further ahead: that exists
				// only after the clock stepped back).
				tau := op.Burst * op.WindowMS
				off := rng.Int64N(2*tau+1) - tau
				return State{TAT: now + floorDiv(off, op.Limit), TATFrac: off - floorDiv(off, op.Limit)*op.Limit}
			}
			// Windows up to the current one: states a store whose clock
			// never went backwards can hold. (After a backwards step the
			// algorithms measure delays from the start of the stored window;
			// see the "Clock going backwards" decision.)
			idx := floorDiv(now-op.PhaseMS, op.WindowMS)
			return State{Window: idx - 2 + rng.Int64N(3), Count: rng.Int64N(op.Limit + 1), Prev: rng.Int64N(op.Limit + 1)}
		}
		l := mustNew(t, store, p)
		resp := l.Check(context.Background(), req("192.0.2.1:1", "/"))
		h := responseHeader(resp)
		d := resp.Decision
		lim, err := parseSFList(h.Values("Ratelimit"))
		if err != nil || len(lim) != 1 {
			t.Fatalf("run %d: RateLimit %q: %v", i, h.Values("Ratelimit"), err)
		}
		tv, _ := lim[0].param("t")
		tSec := tv.(int64)
		if r, _ := lim[0].param("r"); r.(int64) < 0 {
			t.Fatalf("run %d: negative remaining %v", i, r)
		}
		epoch, _ := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64)
		if !resp.Denied() {
			if tSec < 0 || epoch*1000 < store.now {
				t.Fatalf("run %d: allowed with t=%d, epoch reset %d before now %d", i, tSec, epoch, store.now)
			}
			continue
		}
		denials[alg]++
		ra, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
		if err != nil || ra < 1 {
			t.Fatalf("run %d: Retry-After %q", i, h.Get("Retry-After"))
		}
		if ra != tSec || h.Get("Ratelimit-Reset") != strconv.FormatInt(ra, 10) {
			t.Fatalf("run %d: Retry-After %d, t %d, RateLimit-Reset %s: must agree", i, ra, tSec, h.Get("Ratelimit-Reset"))
		}
		exact := d.RetryAfter.Milliseconds()
		if ra*1000 < exact || ra*1000-exact >= 1000 {
			t.Fatalf("run %d: Retry-After %d s for an exact delay of %d ms", i, ra, exact)
		}
		if epoch*1000 < store.now+exact || epoch*1000-(store.now+exact) >= 1000 {
			t.Fatalf("run %d: X-RateLimit-Reset %d for admission at %d ms", i, epoch, store.now+exact)
		}
		op := store.op
		if _, res := applyOne(&op, store.st, store.now+ra*1000); !res.Allowed {
			t.Fatalf("run %d (%v %+v, state %+v, now %d): denied again at Retry-After %d s", i, alg, op, store.st, store.now, ra)
		}
		if _, res := applyOne(&op, store.st, store.now+exact); !res.Allowed {
			t.Fatalf("run %d: denied again at the exact RetryAfter %d ms", i, exact)
		}
		if exact > 0 {
			if _, res := applyOne(&op, store.st, store.now+exact-1); res.Allowed {
				t.Fatalf("run %d: admitted 1 ms before RetryAfter %d ms: not the earliest instant", i, exact)
			}
		}
	}
	for alg, n := range denials {
		if n < runs/20 {
			t.Fatalf("%v: only %d denials in %d runs: the generator does not exercise denials", Algorithm(alg), n, runs)
		}
	}
}
