package conformance

// Helpers for adapters' own tests, beyond the scenarios: send a request and
// read the whole reply, compare a reply with the engine's Response exactly,
// and record the engine's events.

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// Reply is one HTTP response as a test client saw it.
type Reply struct {
	Status int
	Body   string
	Header http.Header
}

// Do sends one request without a body from c and reads the whole reply; a
// transport error fails t.
func Do(t testing.TB, c *http.Client, method, url string) Reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return Reply{Status: resp.StatusCode, Body: string(b), Header: resp.Header}
}

// rateLimitFields are the header fields the engine may write; a reply
// carries exactly the ones the engine's Response lists.
var rateLimitFields = []string{
	limit.HeaderRetryAfter, limit.HeaderCacheControl,
	limit.HeaderRateLimitPolicy, limit.HeaderRateLimit,
	limit.HeaderRateLimitLimit, limit.HeaderRateLimitRemaining, limit.HeaderRateLimitReset,
	limit.HeaderXRateLimitLimit, limit.HeaderXRateLimitRemain, limit.HeaderXRateLimitReset,
}

// AssertEngineFields fails t unless h carries exactly the rate-limit header
// lines that want writes (Response.WriteHeaders into an empty header: the
// same values in the same order, and no rate-limit field want does not
// write). Content-Type and DenialHeader fields are compared only when want
// writes them (a handler sets its own otherwise).
func AssertEngineFields(t testing.TB, h http.Header, want limit.Response) {
	t.Helper()
	exp := http.Header{}
	want.WriteHeaders(exp)
	names := slices.Clone(rateLimitFields)
	for name := range exp {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if got, w := h.Values(name), exp.Values(name); !slices.Equal(got, w) {
			t.Errorf("%s: got %q, want the engine's %q", name, got, w)
		}
	}
}

// AssertDenial fails t unless r is exactly the engine's denial want: its
// Status, its Body byte for byte, and its header fields (AssertEngineFields).
// A denial without a body must carry no Content-Type at all.
func AssertDenial(t testing.TB, r Reply, want limit.Response) {
	t.Helper()
	if !want.Denied() {
		t.Fatalf("AssertDenial: the expected Response is not a denial")
	}
	if r.Status != want.Status {
		t.Errorf("status %d, want the engine's %d", r.Status, want.Status)
	}
	if r.Body != string(want.Body) {
		t.Errorf("body %q, want the engine's %q", r.Body, want.Body)
	}
	if len(want.Body) == 0 && r.Header.Get(limit.HeaderContentType) != "" {
		t.Errorf("a bodiless denial carries Content-Type %q", r.Header.Get(limit.HeaderContentType))
	}
	AssertEngineFields(t, r.Header, want)
}

// Recorder is a limit.Observer that remembers the decisions and issues it is
// told about. The zero value is ready; it is safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	decisions []limit.DecisionEvent
	issues    map[limit.Issue]int
}

var _ limit.Observer = (*Recorder)(nil)

// Decision records e.
func (r *Recorder) Decision(e limit.DecisionEvent) {
	r.mu.Lock()
	r.decisions = append(r.decisions, e)
	r.mu.Unlock()
}

// ClientAddressIssue counts issue.
func (r *Recorder) ClientAddressIssue(_ string, issue limit.Issue) {
	r.mu.Lock()
	if r.issues == nil {
		r.issues = map[limit.Issue]int{}
	}
	r.issues[issue]++
	r.mu.Unlock()
}

// StoreError does nothing.
func (r *Recorder) StoreError(string, limit.FailureMode) {}

// StoreDuration does nothing.
func (r *Recorder) StoreDuration(string, string, time.Duration) {}

// Decisions returns a copy of the recorded decisions, oldest first.
func (r *Recorder) Decisions() []limit.DecisionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.decisions)
}

// Last returns the newest recorded decision (the zero event when none).
func (r *Recorder) Last() limit.DecisionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.decisions) == 0 {
		return limit.DecisionEvent{}
	}
	return r.decisions[len(r.decisions)-1]
}

// Issues returns how many times issue was reported.
func (r *Recorder) Issues(issue limit.Issue) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.issues[issue]
}
