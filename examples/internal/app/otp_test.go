package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
)

// TestOTPBlocksAndTheAdminResetLiftsIt: right codes are free; three wrong
// ones spend the otp quota, the next attempt is limited and blocks the
// client for 8 s, a right code included; the admin GET shows the block and
// its Retry-After, and DELETE lifts it.
func TestOTPBlocksAndTheAdminResetLiftsIt(t *testing.T) {
	l, err := Build(Config{Disclosure: "retry-after", Headers: "ietf", AdminToken: "T"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	attempt := func(code string) limit.Decision {
		t.Helper()
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "http://x/v1/otp", nil)
		r.RemoteAddr = "192.0.2.7:5"
		d := l.OTP.CheckHTTP(w, r, limit.Request{Route: "/v1/otp"})
		if d.Allowed {
			l.OTP.Finish(ctx, &d, OTPStatus(code))
		}
		return d
	}
	for range 10 {
		if d := attempt(OTPCode); !d.Allowed {
			t.Fatalf("a right code: %+v", d)
		}
	}
	for i := range OTPLimit {
		if d := attempt("000000"); !d.Allowed {
			t.Fatalf("wrong code %d: %+v", i+1, d)
		}
	}
	if d := attempt("000000"); d.Allowed || !d.Blocked || d.RetryAfter != OTPBlock {
		t.Fatalf("the attempt past the quota: %+v, want blocked for %v", d, OTPBlock)
	}
	if d := attempt(OTPCode); d.Allowed || !d.Blocked {
		t.Fatalf("a right code while blocked: %+v, want 429", d)
	}
	admin := func(method string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/admin/limits/192.0.2.7", nil)
		r.Header.Set("Authorization", "Bearer T")
		w := httptest.NewRecorder()
		l.Admin.ServeHTTP(w, r)
		return w
	}
	w := admin("GET")
	var out map[string]adminLimit
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil {
		t.Fatalf("GET: %d %s", w.Code, w.Body)
	}
	if g := out["otp"]; g.Allowed || !g.Blocked || g.RetryAfterMS <= 0 || g.RetryAfterMS > OTPBlock.Milliseconds() {
		t.Fatalf("otp: %+v, want blocked", g)
	}
	if w := admin("DELETE"); w.Code != http.StatusNoContent {
		t.Fatalf("DELETE: %d", w.Code)
	}
	if d := attempt(OTPCode); !d.Allowed || d.Blocked {
		t.Fatalf("a right code after the reset: %+v", d)
	}
}
