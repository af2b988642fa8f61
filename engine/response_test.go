package limit_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"

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

func (s *propStore) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s *propStore) take(_ context.Context, op *limitstore.Op) (limitstore.Result, error) {
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

// Over HTTP the answer is 429 with its own problem type and neither
// Retry-After nor a RateLimit field (which would carry a t promising
// success), at every disclosure level; OnLimited still runs.
func TestNeverAdmissibleCostOverHTTPPromisesNoRetry(t *testing.T) {
	for _, d := range []limit.Disclosure{limit.DiscloseNone, limit.DiscloseRetryAfter, limit.DiscloseOnLimit, limit.DiscloseAlways} {
		limited := 0
		l := limittest.MustNew(storeAt(0), limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Disclosure: d,
			HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy,
			CostFunc:    func(limit.Request) int64 { return 6 },
			OnLimited:   func(_ context.Context, _ limit.Request, d limit.Decision) { limited++ }})
		resp := check(l, context.Background(), req("192.0.2.1:1", "/upload"))
		if resp.Status != 429 || !resp.Decision.OverCapacity || limited != 1 {
			t.Fatalf("disclosure %d: status %d, %+v, OnLimited %d", d, resp.Status, resp.Decision, limited)
		}
		for name := range resp.Header {
			switch name {
			case "Cache-Control", "Content-Type":
			default:
				t.Fatalf("disclosure %d: field %s = %q: want no Retry-After and no RateLimit field", d, name, resp.Header[name])
			}
		}
		if d != limit.DiscloseNone && !strings.Contains(string(resp.Body), `"type":"https://github.com/quotagate/quotagate/blob/main/docs/response-contract.md#cost-exceeds-quota"`) {
			t.Fatalf("disclosure %d: body %s, want the cost-exceeds-quota problem type", d, resp.Body)
		}
	}
}

func TestFailureModeResponses(t *testing.T) {
	ctx := context.Background()
	req := limit.Request{Peer: "192.0.2.1:1"}
	// FailLocal denial from the local store.
	l := limittest.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailLocal, Disclosure: limit.DiscloseOnLimit, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy}, limit.WithLocalStore(storeAt(1_767_225_600_000)))
	checkHTTP(l, req)
	w := checkHTTP(l, req)
	t.Logf("FailLocal denial: %d %v", w.Code, w.Header())
	if w.Code != 429 || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Retry-After") == "" || w.Header().Get("Ratelimit") == "" {
		t.Errorf("FailLocal denial: %d %v", w.Code, w.Header())
	}
	// FailClosed: 503, Retry-After 1, no RateLimit fields even at Always.
	l = limittest.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailClosed, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy | limit.HeadersTriplet})
	w = checkHTTP(l, req)
	t.Logf("FailClosed: %d %v %s", w.Code, w.Header(), w.Body)
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Ratelimit") != "" || w.Header().Get("X-Ratelimit-Reset") != "" {
		t.Errorf("FailClosed: %d %v", w.Code, w.Header())
	}
	// FailOpen allowed: no RateLimit numbers at Always.
	l = limittest.MustNew(errStore, limit.Policy{Limit: 1, FailureMode: limit.FailOpen, Disclosure: limit.DiscloseAlways, HeaderStyle: limit.HeadersIETF | limit.HeadersLegacy | limit.HeadersTriplet})
	r := check(l, ctx, req)
	t.Logf("FailOpen fields: %v", r.Fields())
	if r.Denied() || len(r.Fields()) > 1 {
		for _, f := range r.Fields() {
			if f.Name != "Ratelimit-Policy" {
				t.Errorf("FailOpen discloses %v", r.Fields())
				break
			}
		}
	}
}

var updateDoc = flag.Bool("update-doc", false, "rewrite the golden section of docs/response-contract.md from the golden table")

// The response contract, checked end to end: one server per row on a real
// socket (the engine's own net/http handler, which every adapter's writes go
// through or reproduce: conformance checks the adapters against it), a fake
// clock, and the exact set of response header fields (every field but Date)
// with their values.
//
// Every row uses the same policy: sliding window, 3 requests per 60 s,
// windows aligned to the epoch, default name "3p60"; the clock reads
// 2026-01-01T00:00:10.500Z (Unix 1767225610.5), 10.5 s into a window.
//   - allowed: the first request; 2 left; the quota is whole again when
//     this request leaves the sliding window, 109.5 s later (t=110, Legacy
//     epoch 1767225720).
//   - denied: the 4th request; it fits once the 3 requests weigh at most 2,
//     i.e. 20 s into the next window, 69.5 s later (Retry-After 70, t=70,
//     Legacy epoch 1767225680).
//   - fail-open / fail-closed: the store fails; FailOpen admits with no
//     numbers, FailClosed answers 503 with Retry-After 1.
//   - over-capacity: the request costs 4 (CostFunc), more than the quota of
//     3 could ever admit: 429 with its own problem type, no Retry-After and
//     no RateLimit field, without asking the store.
var golden = []contractRow{
	// DiscloseNone
	{"none", "ietf", "allowed", 200, `
Content-Length: 0`, ""},
	{"none", "ietf", "denied", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "ietf", "fail-open", 200, `
Content-Length: 0`, ""},
	{"none", "ietf", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "ietf", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "triplet", "allowed", 200, `
Content-Length: 0`, ""},
	{"none", "triplet", "denied", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "triplet", "fail-open", 200, `
Content-Length: 0`, ""},
	{"none", "triplet", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "triplet", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "legacy", "allowed", 200, `
Content-Length: 0`, ""},
	{"none", "legacy", "denied", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "legacy", "fail-open", 200, `
Content-Length: 0`, ""},
	{"none", "legacy", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "legacy", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "all", "allowed", 200, `
Content-Length: 0`, ""},
	{"none", "all", "denied", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "all", "fail-open", 200, `
Content-Length: 0`, ""},
	{"none", "all", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 0`, ""},
	{"none", "all", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 0`, ""},
	// DiscloseRetryAfter (the default)
	{"retry-after", "ietf", "allowed", 200, `
Content-Length: 0`, ""},
	{"retry-after", "ietf", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Retry-After: 70`, body429},
	{"retry-after", "ietf", "fail-open", 200, `
Content-Length: 0`, ""},
	{"retry-after", "ietf", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"retry-after", "ietf", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"retry-after", "triplet", "allowed", 200, `
Content-Length: 0`, ""},
	{"retry-after", "triplet", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Retry-After: 70`, body429},
	{"retry-after", "triplet", "fail-open", 200, `
Content-Length: 0`, ""},
	{"retry-after", "triplet", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"retry-after", "triplet", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"retry-after", "legacy", "allowed", 200, `
Content-Length: 0`, ""},
	{"retry-after", "legacy", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Retry-After: 70`, body429},
	{"retry-after", "legacy", "fail-open", 200, `
Content-Length: 0`, ""},
	{"retry-after", "legacy", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"retry-after", "legacy", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"retry-after", "all", "allowed", 200, `
Content-Length: 0`, ""},
	{"retry-after", "all", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Retry-After: 70`, body429},
	{"retry-after", "all", "fail-open", 200, `
Content-Length: 0`, ""},
	{"retry-after", "all", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"retry-after", "all", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	// DiscloseOnLimit
	{"on-limit", "ietf", "allowed", 200, `
Content-Length: 0`, ""},
	{"on-limit", "ietf", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Ratelimit: "3p60";r=0;t=70
Ratelimit-Policy: "3p60";q=3;w=60
Retry-After: 70`, body429},
	{"on-limit", "ietf", "fail-open", 200, `
Content-Length: 0`, ""},
	{"on-limit", "ietf", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"on-limit", "ietf", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"on-limit", "triplet", "allowed", 200, `
Content-Length: 0`, ""},
	{"on-limit", "triplet", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Ratelimit-Limit: 3
Ratelimit-Policy: 3;w=60
Ratelimit-Remaining: 0
Ratelimit-Reset: 70
Retry-After: 70`, body429},
	{"on-limit", "triplet", "fail-open", 200, `
Content-Length: 0`, ""},
	{"on-limit", "triplet", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"on-limit", "triplet", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"on-limit", "legacy", "allowed", 200, `
Content-Length: 0`, ""},
	{"on-limit", "legacy", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Retry-After: 70
X-Ratelimit-Limit: 3
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 1767225680`, body429},
	{"on-limit", "legacy", "fail-open", 200, `
Content-Length: 0`, ""},
	{"on-limit", "legacy", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"on-limit", "legacy", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"on-limit", "all", "allowed", 200, `
Content-Length: 0`, ""},
	{"on-limit", "all", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Ratelimit: "3p60";r=0;t=70
Ratelimit-Limit: 3
Ratelimit-Policy: "3p60";q=3;w=60
Ratelimit-Remaining: 0
Ratelimit-Reset: 70
Retry-After: 70
X-Ratelimit-Limit: 3
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 1767225680`, body429},
	{"on-limit", "all", "fail-open", 200, `
Content-Length: 0`, ""},
	{"on-limit", "all", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"on-limit", "all", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	// DiscloseAlways
	{"always", "ietf", "allowed", 200, `
Content-Length: 0
Ratelimit: "3p60";r=2;t=110
Ratelimit-Policy: "3p60";q=3;w=60`, ""},
	{"always", "ietf", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Ratelimit: "3p60";r=0;t=70
Ratelimit-Policy: "3p60";q=3;w=60
Retry-After: 70`, body429},
	{"always", "ietf", "fail-open", 200, `
Content-Length: 0`, ""},
	{"always", "ietf", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"always", "ietf", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"always", "triplet", "allowed", 200, `
Content-Length: 0
Ratelimit-Limit: 3
Ratelimit-Policy: 3;w=60
Ratelimit-Remaining: 2
Ratelimit-Reset: 110`, ""},
	{"always", "triplet", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Ratelimit-Limit: 3
Ratelimit-Policy: 3;w=60
Ratelimit-Remaining: 0
Ratelimit-Reset: 70
Retry-After: 70`, body429},
	{"always", "triplet", "fail-open", 200, `
Content-Length: 0`, ""},
	{"always", "triplet", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"always", "triplet", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"always", "legacy", "allowed", 200, `
Content-Length: 0
X-Ratelimit-Limit: 3
X-Ratelimit-Remaining: 2
X-Ratelimit-Reset: 1767225720`, ""},
	{"always", "legacy", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Retry-After: 70
X-Ratelimit-Limit: 3
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 1767225680`, body429},
	{"always", "legacy", "fail-open", 200, `
Content-Length: 0`, ""},
	{"always", "legacy", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"always", "legacy", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
	{"always", "all", "allowed", 200, `
Content-Length: 0
Ratelimit: "3p60";r=2;t=110
Ratelimit-Limit: 3
Ratelimit-Policy: "3p60";q=3;w=60
Ratelimit-Remaining: 2
Ratelimit-Reset: 110
X-Ratelimit-Limit: 3
X-Ratelimit-Remaining: 2
X-Ratelimit-Reset: 1767225720`, ""},
	{"always", "all", "denied", 429, `
Cache-Control: no-store
Content-Length: 63
Content-Type: application/problem+json
Ratelimit: "3p60";r=0;t=70
Ratelimit-Limit: 3
Ratelimit-Policy: "3p60";q=3;w=60
Ratelimit-Remaining: 0
Ratelimit-Reset: 70
Retry-After: 70
X-Ratelimit-Limit: 3
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 1767225680`, body429},
	{"always", "all", "fail-open", 200, `
Content-Length: 0`, ""},
	{"always", "all", "fail-closed", 503, `
Cache-Control: no-store
Content-Length: 65
Content-Type: application/problem+json
Retry-After: 1`, body503},
	{"always", "all", "over-capacity", 429, `
Cache-Control: no-store
Content-Length: 158
Content-Type: application/problem+json`, bodyOverCapacity},
}

const (
	body429          = body429Default
	bodyOverCapacity = `{"type":"https://github.com/quotagate/quotagate/blob/main/docs/response-contract.md#cost-exceeds-quota","title":"Request cost exceeds the quota","status":429}`
)

type contractRow struct {
	disclosure, style, outcome string
	status                     int
	headers                    string // "\nName: value" lines, sorted by name; a field's values in order
	body                       string
}

var disclosures = map[string]limit.Disclosure{
	"none": limit.DiscloseNone, "retry-after": limit.DiscloseRetryAfter,
	"on-limit": limit.DiscloseOnLimit, "always": limit.DiscloseAlways,
}

var styles = map[string]limit.HeaderStyle{
	"ietf": limit.HeadersIETF, "triplet": limit.HeadersTriplet, "legacy": limit.HeadersLegacy,
	"all": limit.HeadersIETF | limit.HeadersTriplet | limit.HeadersLegacy,
}

// contractClock is 2026-01-01T00:00:10.500Z.
var contractClock = time.Date(2026, 1, 1, 0, 0, 10, 500_000_000, time.UTC)

// serveRow starts a server for one row and returns the response to the
// request the row describes.
func serveRow(t *testing.T, row contractRow) (int, http.Header, string) {
	t.Helper()
	p := limit.Policy{Limit: 3, Window: time.Minute, AlignWindows: true,
		Disclosure: disclosures[row.disclosure], HeaderStyle: styles[row.style]}
	var store limitstore.Store
	switch row.outcome {
	case "allowed", "denied":
		store = limittest.NewStore(limittest.NewClock(contractClock).Now)
	case "over-capacity":
		store = limittest.FailingStore{Panic: true} // never asked
		p.CostFunc = func(limit.Request) int64 { return 4 }
	case "fail-open":
		store, p.FailureMode = errStore, limit.FailOpen
	case "fail-closed":
		store, p.FailureMode = errStore, limit.FailClosed
	default:
		t.Fatalf("unknown outcome %q", row.outcome)
	}
	l, err := limit.New(store, p)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.HTTPHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), nil, nil))
	defer srv.Close()
	c := limittest.ClientFrom("127.0.0.7")
	defer c.CloseIdleConnections()
	n := 1
	if row.outcome == "denied" {
		n = 4
	}
	var (
		status int
		h      http.Header
		body   string
	)
	for i := 0; i < n; i++ {
		resp, err := c.Get(srv.URL + "/v1/notes/1")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, h, body = resp.StatusCode, resp.Header, string(b)
	}
	return status, h, body
}

// headerLines renders h as sorted "Name: value" lines, without Date.
func headerLines(h http.Header) string {
	var lines []string
	for name, vs := range h {
		if name == "Date" {
			continue
		}
		for _, v := range vs {
			lines = append(lines, name+": "+v)
		}
	}
	slices.SortStableFunc(lines, func(a, b string) int {
		return strings.Compare(a[:strings.IndexByte(a, ':')], b[:strings.IndexByte(b, ':')])
	})
	return strings.Join(lines, "\n")
}

func TestResponseContractGolden(t *testing.T) {
	if len(golden) != len(disclosures)*len(styles)*len(outcomeOrder) {
		t.Errorf("golden table has %d rows, want every disclosure x style x outcome (%d)", len(golden), len(disclosures)*len(styles)*len(outcomeOrder))
	}
	for _, row := range golden {
		t.Run(row.disclosure+"/"+row.style+"/"+row.outcome, func(t *testing.T) {
			t.Parallel()
			status, h, body := serveRow(t, row)
			if got := headerLines(h); status != row.status || got != strings.TrimPrefix(row.headers, "\n") || body != row.body {
				t.Errorf("got\n%d\n%s\n%s\nwant\n%d\n%s\n%s", status, got, body, row.status, row.headers, row.body)
			}
		})
	}
}

// docPath is the document that renders the golden table for readers; the
// section between the markers is generated from the table above, and this
// test keeps the two equal (-update-doc rewrites the section).
const (
	docPath = "../docs/response-contract.md"
	// readmePath renders the level table and one example per style.
	readmePath = "../README.md"
	docBegin   = "<!-- BEGIN GENERATED from engine/response_test.go: `go test -run TestResponseContractDoc -update-doc` -->"
	docEnd     = "<!-- END GENERATED -->"
)

func TestResponseContractDoc(t *testing.T) {
	for _, doc := range []struct {
		path string
		full bool
	}{{docPath, true}, {readmePath, false}} {
		raw, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatalf("%v (the golden table must be rendered there)", err)
		}
		text := string(raw)
		i, j := strings.Index(text, docBegin), strings.Index(text, docEnd)
		if i < 0 || j < i {
			t.Fatalf("%s lacks the generated-section markers", doc.path)
		}
		want := docBegin + "\n" + renderContract(doc.full) + docEnd
		if got := text[i : j+len(docEnd)]; got != want {
			if !*updateDoc {
				t.Fatalf("%s is out of date with the golden table: run go test -run TestResponseContractDoc -update-doc in engine", doc.path)
			}
			if err := os.WriteFile(doc.path, []byte(text[:i]+want+text[j+len(docEnd):]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var (
	disclosureOrder = []string{"none", "retry-after", "on-limit", "always"}
	styleOrder      = []string{"ietf", "triplet", "legacy", "all"}
	outcomeOrder    = []string{"allowed", "denied", "fail-open", "fail-closed", "over-capacity"}
	disclosureDoc   = map[string]string{"none": "`DiscloseNone`", "retry-after": "`DiscloseRetryAfter` (default)", "on-limit": "`DiscloseOnLimit`", "always": "`DiscloseAlways`"}
	styleDoc        = map[string]string{"ietf": "`HeadersIETF` (default)", "triplet": "`HeadersTriplet`", "legacy": "`HeadersLegacy`", "all": "all three combined"}
	outcomeDoc      = map[string]string{"allowed": "allowed", "denied": "denied (429)", "fail-open": "store down, `FailOpen`", "fail-closed": "store down, `FailClosed` (503)", "over-capacity": "cost above the quota (429)"}
)

func findRow(d, s, o string) contractRow {
	for _, r := range golden {
		if r.disclosure == d && r.style == s && r.outcome == o {
			return r
		}
	}
	panic("no golden row " + d + "/" + s + "/" + o)
}

// contractFieldNames lists the names of a row's header fields, Content-Length left
// out (it is HTTP framing, not the contract).
func contractFieldNames(r contractRow) string {
	var names []string
	for _, line := range strings.Split(strings.TrimPrefix(r.headers, "\n"), "\n") {
		name := line[:strings.IndexByte(line, ':')]
		if name != "Content-Length" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "—"
	}
	return strings.Join(names, ", ")
}

func httpResponse(r contractRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\n%s\n", r.status, http.StatusText(r.status), strings.TrimPrefix(r.headers, "\n"))
	if r.body != "" {
		b.WriteString("\n" + r.body + "\n")
	}
	return b.String()
}

// renderContract renders the level table and one example response per style,
// and with full the whole golden table too.
func renderContract(full bool) string {
	var b strings.Builder
	b.WriteString("\n### Which header fields each disclosure level sends\n\n")
	b.WriteString("With the default header style (`HeadersIETF`); the other styles send their own\nRateLimit fields in the same cells (see the full table).\n\n")
	b.WriteString("| Disclosure |")
	for _, o := range outcomeOrder {
		b.WriteString(" " + outcomeDoc[o] + " |")
	}
	b.WriteString("\n|---|---|---|---|---|---|\n")
	for _, d := range disclosureOrder {
		b.WriteString("| " + disclosureDoc[d] + " |")
		for _, o := range outcomeOrder {
			b.WriteString(" " + contractFieldNames(findRow(d, "ietf", o)) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n### One example response per style\n\n")
	b.WriteString("`DiscloseAlways`, so that every field of the style appears: the denied request\nfirst, then the allowed one. Go writes field names in its canonical case\n(`Ratelimit-Policy`); HTTP field names are case-insensitive.\n")
	for _, s := range styleOrder {
		fmt.Fprintf(&b, "\n#### %s\n\n```http\n%s```\n\n```http\n%s```\n", styleDoc[s], httpResponse(findRow("always", s, "denied")), httpResponse(findRow("always", s, "allowed")))
	}
	if !full {
		b.WriteString("\nThe full golden table (every level x style x outcome, with values) is in\n[docs/response-contract.md](docs/response-contract.md).\n")
		return b.String()
	}
	b.WriteString("\n### The full golden table\n\n")
	b.WriteString("Every header field the server sends except `Date`, with its value; bodies: `429` =\n`" + body429 + "`, `503` = `" + body503 + "`,\n`429c` = `" + bodyOverCapacity + "`.\n\n")
	b.WriteString("| Disclosure | Style | Outcome | Status | Header fields | Body |\n|---|---|---|---|---|---|\n")
	for _, r := range golden {
		body := "—"
		switch r.body {
		case body429:
			body = "429"
		case body503:
			body = "503"
		case bodyOverCapacity:
			body = "429c"
		}
		fields := strings.ReplaceAll(strings.TrimPrefix(r.headers, "\n"), "\n", "<br>")
		fmt.Fprintf(&b, "| %s | %s | %s | %d | `%s` | %s |\n", r.disclosure, r.style, r.outcome, r.status, strings.ReplaceAll(fields, "<br>", "`<br>`"), body)
	}
	return b.String()
}
