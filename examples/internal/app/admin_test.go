package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
)

// TestAdminRoutes: GET answers the Peek of the global, login and otp limiters
// and spends nothing, DELETE resets both (204), every spelling of an
// address reaches the same identity, a bad identity is 400 with the
// engine's reason, and without the Bearer token everything is 401.
func TestAdminRoutes(t *testing.T) {
	l, err := Build(Config{Disclosure: "retry-after", Headers: "ietf", AdminToken: "T"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nl, _ := Build(Config{Disclosure: "retry-after", Headers: "ietf"}, nil); nl.Admin != nil {
		t.Fatal("Admin is set without -admin-token")
	}
	do := func(method, path, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		l.Admin.ServeHTTP(w, r)
		return w
	}
	peek := func(path string) map[string]adminLimit {
		t.Helper()
		w := do("GET", path, "T")
		var out map[string]adminLimit
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return out
	}
	for range 5 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "http://x/v1/login", nil)
		r.RemoteAddr = "192.0.2.1:5"
		l.Login.CheckHTTP(w, r, limit.Request{Route: "/v1/login"})
	}
	for range 2 { // a look spends nothing
		got := peek("/admin/limits/192.0.2.1")
		if g := got["login"]; g.Allowed || g.Remaining != 0 || g.RetryAfterMS <= 0 || g.Identity != "192.0.2.1" || g.Limit != 5 {
			t.Fatalf("login: %+v, want spent with a Retry-After", g)
		}
		if g := got["global"]; !g.Allowed || g.Remaining != 99 {
			t.Fatalf("global: %+v, want 100 left (login's own mount only)", g)
		}
	}
	for _, p := range []string{"/admin/limits/192.0.2.1:1234", "/admin/limits/::ffff:192.0.2.1", "/admin/limits/192.0.2.1%2F32"} {
		if g := peek(p)["login"]; g.Allowed {
			t.Errorf("GET %s: %+v, want the same spent identity", p, g)
		}
	}
	if w := do("DELETE", "/admin/limits/192.0.2.1", "T"); w.Code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", w.Code, w.Body)
	}
	if g := peek("/admin/limits/192.0.2.1")["login"]; !g.Allowed || g.Remaining != 4 {
		t.Fatalf("after DELETE: %+v, want a whole quota", g)
	}
	for _, c := range []struct {
		method, path, token string
		status              int
		body                string
	}{
		{"GET", "/admin/limits/192.0.2.1", "", http.StatusUnauthorized, "token"},
		{"DELETE", "/admin/limits/192.0.2.1", "wrong", http.StatusUnauthorized, "token"},
		{"GET", "/admin/limits/300.1.2.3", "T", http.StatusBadRequest, "spelled like a client address"},
		{"DELETE", "/admin/limits/192.0.2.0%2F24", "T", http.StatusBadRequest, "spans several identities"},
		{"POST", "/admin/limits/192.0.2.1", "T", http.StatusMethodNotAllowed, "GET or DELETE"},
		{"GET", "/admin/limits/", "T", http.StatusNotFound, "{identity}"},
	} {
		w := do(c.method, c.path, c.token)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s %s (token %q): %d %q, want %d with %q", c.method, c.path, c.token, w.Code, w.Body, c.status, c.body)
		}
	}
}
