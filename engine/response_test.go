package limit_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/quotagate/quotagate/engine/limitstore"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

func fieldNames(resp response) []string {
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
	levels := []limit.Disclosure{limit.DiscloseNone, limit.DiscloseRetryAfter, limit.DiscloseOnLimit, limit.DiscloseAlways}
	var prevAllowed, prevDenied []string
	var prevDecisions []limit.Decision
	for _, lv := range levels {
		store := storeAt(epochMS)
		l := mustNew(t, store, limit.Policy{Limit: 3, Window: time.Minute, Disclosure: lv, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy})
		var allowed, denied []string
		var decisions []limit.Decision
		for i := 0; i < 5; i++ {
			resp := check(l, context.Background(), req("192.0.2.1:1000", "/x"))
			d := limit.WithoutTicket(resp.Decision)
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
	store := storeAt(epochMS)
	for i, name := range names {
		global := mustNew(t, store, limit.Policy{Name: name, Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways})
		route := mustNew(t, store, limit.Policy{Name: name + "2", Limit: 5, Window: 90 * time.Second, Disclosure: limit.DiscloseAlways})
		peer := "192.0.2." + strconv.Itoa(1+i%250) + ":1"
		h, ds := stack(req(peer, "/"), global, route)

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
		wantQ, wantW, wantR := []int64{10, 5}, []int64{60, 90}, []int64{ds[0].Remaining, ds[1].Remaining}
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
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet})
	h := check(l, context.Background(), req("192.0.2.1:1", "/")).Header
	pol, err := parseSFList(h.Values("Ratelimit-Policy"))
	if err != nil || len(pol) != 1 || pol[0].Value != "10p60" {
		t.Fatalf("RateLimit-Policy %q: %v %v", h.Values("Ratelimit-Policy"), pol, err)
	}
	for _, name := range []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"} {
		if _, err := parseSFItem(h.Get(name)); err != nil || len(h.Values(name)) != 1 {
			t.Fatalf("%s %q: %v", name, h.Values(name), err)
		}
	}
	only := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 10, Window: time.Minute, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet})
	h = check(only, context.Background(), req("192.0.2.1:1", "/")).Header
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
	all := limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy
	store := storeAt(epochMS)
	global := mustNew(t, store, limit.Policy{Name: "global", Limit: 100, Window: time.Minute, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: all})
	login := mustNew(t, store, limit.Policy{Name: "login", Limit: 5, Window: 10 * time.Second, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: all})
	policyMember := map[*limit.Limiter]string{global: `"global";q=100;w=60`, login: `"login";q=5;w=10`}
	for _, order := range [][]*limit.Limiter{{global, login}, {login, global}} {
		store.Reset()
		h, ds := stack(req("192.0.2.9:1", "/login"), order...)
		first, second := ds[0].Bucket, ds[1].Bucket
		if got, want := h.Values("Ratelimit-Policy"), []string{policyMember[order[0]], policyMember[order[1]]}; !slices.Equal(got, want) {
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
	a := mustNew(t, store, limit.Policy{Name: "a", Limit: 5, Window: 10 * time.Second, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet})
	b := mustNew(t, store, limit.Policy{Name: "b", Limit: 5, Window: 60 * time.Second, AlignWindows: true, Algorithm: limit.FixedWindow, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersTriplet})
	h, _ := stack(req("192.0.2.9:1", "/"), a, b)
	if h.Get("Ratelimit-Reset") != "50" || h.Get("Ratelimit-Remaining") != "4" {
		t.Fatalf("equal remaining: %v, want b's later reset 50", h)
	}
	if got := h.Values("Ratelimit-Policy"); !slices.Equal(got, []string{"5;w=10", "5;w=60"}) {
		t.Fatalf("Triplet RateLimit-Policy list %q", got)
	}
}

func TestProblemType(t *testing.T) {
	bodies := map[string]string{}
	valid := []string{"", "about:blank", problemTypeQuotaExceeded, "/problems/rate-limit", "urn:example:quota", "https://example.com/p?x=1&y=%41#frag", "tag:example.com,2026:quota"}
	for _, typ := range valid {
		l, err := limit.New(storeAt(epochMS), limit.Policy{Limit: 1, ProblemType: typ})
		if err != nil {
			t.Fatalf("ProblemType %q: %v", typ, err)
		}
		check(l, context.Background(), req("192.0.2.1:1", "/"))
		resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
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
		bodies[typ] = string(resp.Body)
	}
	if got := bodies[""]; got != `{"type":"about:blank","title":"Too Many Requests","status":429}` {
		t.Fatalf("default body %s", got)
	}
	if got := bodies[problemTypeQuotaExceeded]; got != `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}` {
		t.Fatalf("quota-exceeded body %s", got)
	}
	invalid := []string{"a b", `a"b`, `a\b`, "<x>", "caf\xc3\xa9", "%4", "%zz", "x\n", "{a}", "a|b", "http://[::1"}
	for _, typ := range invalid {
		_, err := limit.New(storeAt(epochMS), limit.Policy{ProblemType: typ})
		if !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "ProblemType") {
			t.Fatalf("ProblemType %q: err %v, want ErrInvalidPolicy naming ProblemType", typ, err)
		}
	}
}

// The default bodies say nothing about the limit, the delay, the client or
// any error.
func TestDefaultBodiesDiscloseNothing(t *testing.T) {
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 7, Window: 13 * time.Second})
	var resp response
	for i := 0; i < 8; i++ {
		resp = check(l, context.Background(), req("203.0.113.77:5555", "/"))
	}
	closed := mustNew(t, errStore, limit.Policy{Limit: 7, Window: 13 * time.Second, FailureMode: limit.FailClosed})
	resp503 := check(closed, context.Background(), req("203.0.113.77:5555", "/"))
	for _, r := range []response{resp, resp503} {
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

// CheckHTTP writes nothing for an allowed request at the default
// disclosure, and the whole limited response (status, Content-Length, body)
// for a limited one.
func TestCheckHTTPWritesTheLimitedResponse(t *testing.T) {
	l := mustNew(t, storeAt(epochMS), limit.Policy{Limit: 1})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	w := httptest.NewRecorder()
	if !l.CheckHTTP(w, r, limit.Request{}).Allowed {
		t.Fatal("first request limited")
	}
	if w.Code != 200 || len(w.Header()) != 0 || w.Body.Len() != 0 || w.Flushed {
		t.Fatal("CheckHTTP wrote to an allowed response")
	}
	w = httptest.NewRecorder()
	if l.CheckHTTP(w, r, limit.Request{}).Allowed {
		t.Fatal("second request allowed")
	}
	body := `{"type":"about:blank","title":"Too Many Requests","status":429}`
	if w.Code != 429 || w.Body.String() != body || w.Header().Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("CheckHTTP: %d %v %q", w.Code, w.Header(), w.Body)
	}
}

// propStore is not a store double but a state generator: it applies a random
// State chosen by gen for the Op it is given (a state no sequence of
// requests at one clock would reach quickly), and keeps the Op and State so
// that the test can replay the decision later.
type propStore struct {
	now int64
	gen func(q *limitstore.Quota, now int64) limitstore.State
	op  limitstore.Op
	st  limitstore.State
}

func (s *propStore) Take(_ context.Context, op *limitstore.Op) (limitstore.Result, error) {
	s.op = *op
	s.op.Quotas[0].Key = nil
	s.st = s.gen(&op.Quotas[0], s.now)
	_, res := limit.ApplyOne(op, s.st, s.now)
	return limitstore.Result{Allowed: res.Allowed, NowMS: s.now, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.QuotaResult{res}}, nil
}

func (s *propStore) Describe() limitstore.Info { return limitstore.Info{} }

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
		alg := limit.Algorithm(rng.IntN(3))
		lim := 1 + rng.Int64N(50)
		w := windows[rng.IntN(len(windows))]
		p := limit.Policy{Algorithm: alg, Limit: lim, Window: time.Duration(w) * time.Millisecond, Disclosure: limit.DiscloseAlways,
			HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy, AlignWindows: rng.IntN(2) == 0}
		capacity := lim
		if alg == limit.TokenBucket {
			p.Window = time.Duration(lim*(1+rng.Int64N(2000))) * time.Millisecond
			p.Burst = 1 + rng.Int64N(2*lim)
			capacity = p.Burst
		}
		cost := 1 + rng.Int64N(capacity)
		p.CostFunc = func(limit.Request) int64 { return cost }
		store := &propStore{now: 1_700_000_000_000 + rng.Int64N(1_000_000_000)}
		store.gen = func(op *limitstore.Quota, now int64) limitstore.State {
			if op.Algorithm == limit.TokenBucket {
				// TAT - now in units of 1/Limit ms, from a bucket full for
				// a while to an empty one (no further ahead: that exists
				// only after the clock stepped back).
				tau := op.Burst * op.WindowMS
				off := rng.Int64N(2*tau+1) - tau
				return limitstore.State{TAT: now + floorDiv(off, op.Limit), TATFrac: off - floorDiv(off, op.Limit)*op.Limit}
			}
			// Windows up to the current one: states a store whose clock
			// never went backwards can hold. (After a backwards step the
			// algorithms measure delays from the start of the stored window;
			// see the "Clock going backwards" decision.)
			idx := (now - op.PhaseMS) / op.WindowMS // both positive: the floor
			return limitstore.State{Window: idx - 2 + rng.Int64N(3), Count: rng.Int64N(op.Limit + 1), Prev: rng.Int64N(op.Limit + 1)}
		}
		l := mustNew(t, store, p)
		resp := check(l, context.Background(), req("192.0.2.1:1", "/"))
		h := resp.Header
		d := resp.Decision
		rl, err := parseSFList(h.Values("Ratelimit"))
		if err != nil || len(rl) != 1 {
			t.Fatalf("run %d: RateLimit %q: %v", i, h.Values("Ratelimit"), err)
		}
		tv, _ := rl[0].param("t")
		tSec := tv.(int64)
		if r, _ := rl[0].param("r"); r.(int64) < 0 {
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
		if _, res := limit.ApplyOne(&op, store.st, store.now+ra*1000); !res.Allowed {
			t.Fatalf("run %d (%v %+v, state %+v, now %d): denied again at Retry-After %d s", i, alg, op, store.st, store.now, ra)
		}
		if _, res := limit.ApplyOne(&op, store.st, store.now+exact); !res.Allowed {
			t.Fatalf("run %d: denied again at the exact RetryAfter %d ms", i, exact)
		}
		if exact > 0 {
			if _, res := limit.ApplyOne(&op, store.st, store.now+exact-1); res.Allowed {
				t.Fatalf("run %d: admitted 1 ms before RetryAfter %d ms: not the earliest instant", i, exact)
			}
		}
	}
	for alg, n := range denials {
		if n < runs/20 {
			t.Fatalf("%v: only %d denials in %d runs: the generator does not exercise denials", limit.Algorithm(alg), n, runs)
		}
	}
}

// problemTypeQuotaExceeded is the problem type the ratelimit-headers draft
// asks IANA to register.
const problemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// floorDiv is a / b rounded towards negative infinity, b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
