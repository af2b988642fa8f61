package conformance_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
)

// store is a minimal in-process store at a fixed instant.
type store struct {
	mu sync.Mutex
	m  map[string]limit.State
}

func (s *store) Take(_ context.Context, op *limit.Op) (limit.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]limit.State{}
	}
	var sts [limit.MaxQuotas]limit.State
	for i := range op.N {
		sts[i] = s.m[string(op.Quotas[i].Key)]
	}
	res := op.Apply(&sts, 1_767_225_600_000)
	for i := range op.N {
		if res.Quotas[i].TTLMS > 0 && !op.Refund {
			s.m[string(op.Quotas[i].Key)] = sts[i]
		}
	}
	return res, nil
}

// fakeT records Errorf calls instead of failing the test.
type fakeT struct {
	testing.TB
	errs []string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Errorf(format string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(format, a...)) }

func denial(t *testing.T, d limit.Disclosure) limit.Response {
	t.Helper()
	l := limit.MustNew(&store{}, limit.Policy{Limit: 1, AlignWindows: true, Disclosure: d, HeaderStyle: limit.HeadersIETF | limit.HeadersTriplet})
	l.Check(context.Background(), limit.Request{Peer: "192.0.2.1"})
	resp := l.Check(context.Background(), limit.Request{Peer: "192.0.2.1"})
	if !resp.Denied() {
		t.Fatal("second request was not denied")
	}
	return resp
}

// reply renders resp the way a correct adapter would.
func reply(resp limit.Response) conformance.Reply {
	h := http.Header{}
	resp.WriteHeaders(h)
	h.Set("Date", "Thu, 01 Jan 2026 00:00:00 GMT") // fields the engine does not own are ignored
	return conformance.Reply{Status: resp.Status, Body: string(resp.Body), Header: h}
}

func TestAssertDenial(t *testing.T) {
	tests := []struct {
		name       string
		disclosure limit.Disclosure
		spoil      func(*conformance.Reply)
		wantErrors bool
	}{
		{"exact", limit.DiscloseOnLimit, func(*conformance.Reply) {}, false},
		{"exact_bodiless", limit.DiscloseNone, func(*conformance.Reply) {}, false},
		{"status", limit.DiscloseOnLimit, func(r *conformance.Reply) { r.Status = 503 }, true},
		{"body", limit.DiscloseOnLimit, func(r *conformance.Reply) { r.Body += "\n" }, true},
		{"missing_retry_after", limit.DiscloseOnLimit, func(r *conformance.Reply) { r.Header.Del("Retry-After") }, true},
		{"value", limit.DiscloseOnLimit, func(r *conformance.Reply) { r.Header.Set("Ratelimit", r.Header.Get("Ratelimit")+";x") }, true},
		{"triplet_missing", limit.DiscloseOnLimit, func(r *conformance.Reply) { r.Header.Del("Ratelimit-Remaining") }, true},
		{"extra_field", limit.DiscloseRetryAfter, func(r *conformance.Reply) { r.Header.Set("X-Ratelimit-Limit", "1") }, true},
		{"content_type_without_body", limit.DiscloseNone, func(r *conformance.Reply) { r.Header.Set("Content-Type", "text/plain") }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := denial(t, tc.disclosure)
			r := reply(want)
			tc.spoil(&r)
			ft := &fakeT{TB: t}
			conformance.AssertDenial(ft, r, want)
			if got := len(ft.errs) > 0; got != tc.wantErrors {
				t.Fatalf("errors %q, want errors: %v", ft.errs, tc.wantErrors)
			}
		})
	}
}
