package limit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// frameworkCtx stands for another framework's native context.
type frameworkCtx struct{ key string }

// A typed key or cost function sees the framework's own context; mounted
// under another framework (Request.Native of another type) it is not
// called: the identity falls through to the client address, the cost is the
// policy's, and the mismatch is reported on every request and logged once,
// naming both types.
func TestTypedFunctionsOverTheNativeContext(t *testing.T) {
	var logs limittest.Log
	rec := &limittest.Recorder{}
	var keyCalls, costCalls int
	l := mustNew(t, limittest.NewStore(nil), limit.Policy{Limit: 3,
		KeyFunc:  limit.KeyFuncOf(func(c *frameworkCtx) (string, error) { keyCalls++; return c.key, nil }),
		CostFunc: limit.CostFuncOf(func(c *frameworkCtx) int64 { costCalls++; return 3 }),
	}, limit.WithObserver(rec), limit.WithLogger(logs.Logger()))

	// The framework's own context: the typed functions run.
	d := l.Check(context.Background(), limit.Request{Peer: "192.0.2.1:1", Native: &frameworkCtx{key: "user-1"}}, limittest.NewWriter())
	if !d.Allowed || d.KeySource != limit.KeySourceKeyFunc || d.Cost != 3 || keyCalls != 1 || costCalls != 1 {
		t.Fatalf("own context: %+v, key calls %d, cost calls %d", d, keyCalls, costCalls)
	}
	if n := rec.Issues(limit.Issue("native-mismatch")); n != 0 {
		t.Fatalf("%d mismatches reported for the right type", n)
	}

	// Another framework's context (net/http's *http.Request): not called.
	for range 2 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		d = l.CheckHTTP(w, r, limit.Request{})
		if !d.Allowed || d.KeySource != limit.KeySourceSocket || d.Cost != 1 {
			t.Fatalf("other context: %+v, want the client address and the policy's cost", d)
		}
	}
	if keyCalls != 1 || costCalls != 1 {
		t.Fatalf("typed functions called with another framework's context: key %d, cost %d", keyCalls, costCalls)
	}
	if n := rec.Issues(limit.Issue("native-mismatch")); n != 4 {
		t.Fatalf("%d native-mismatch issues, want 4 (key and cost, two requests)", n)
	}
	if n := logs.Count("quotagate: native-mismatch"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs.String())
	}
	if s := logs.String(); !strings.Contains(s, "*limit_test.frameworkCtx") || !strings.Contains(s, "*http.Request") {
		t.Fatalf("the log line does not name both types:\n%s", s)
	}
}

// A typed function called outside the engine (a test of the application's
// own) with a Request of another type returns the fall-through values and
// reports nothing, since no Limiter decides.
func TestTypedFunctionsOutsideTheEngine(t *testing.T) {
	key := limit.KeyFuncOf(func(r *http.Request) (string, error) { return "k", nil })
	if id, err := key(limit.Request{Native: "not a request"}); id != "" || err != nil {
		t.Fatalf("key %q %v, want a fall-through", id, err)
	}
	cost := limit.CostFuncOf(func(r *http.Request) int64 { return 5 })
	if n := cost(limit.Request{Native: httptest.NewRequest("GET", "/", nil)}); n != 5 {
		t.Fatalf("cost %d, want 5", n)
	}
}
