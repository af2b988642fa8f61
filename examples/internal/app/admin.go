package app

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// AdminPrefix is the path of the admin routes, followed by the identity
// (path-escaped: a prefix such as 2001:db8::/64 is spelled 2001:db8::%2F64).
const AdminPrefix = "/admin/limits/"

// adminTimeout bounds one admin call to the store (the Redis store's own
// timeout answers sooner).
const adminTimeout = 2 * time.Second

// adminLimit is one limiter's part of GET /admin/limits/{identity}: the
// Decision a request of cost 1 would get now (Limiter.Peek).
type adminLimit struct {
	Allowed      bool   `json:"allowed"`
	Outcome      string `json:"outcome"`
	Identity     string `json:"identity"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	// Blocked: a block (Policy.BlockFor) limits the identity, or would
	// begin with its next request; RetryAfterMS is then the block's.
	Blocked bool `json:"blocked"`
}

// adminHandler serves the admin routes over the named limiters, for a
// caller presenting "Authorization: Bearer <token>":
//
//	GET    /admin/limits/{identity}  200 {"global": {...}, "login": {...}, "otp": {...}}: each limiter's Peek
//	DELETE /admin/limits/{identity}  204: every limiter's Reset
//
// 401 without the token, 400 for an identity the limiters never key by
// (the engine's reason in the body), 503 when the store failed, 405 for
// another method.
type adminHandler struct {
	token    string
	names    []string
	limiters []*limit.Limiter
}

func (h *adminHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(auth), []byte(h.token)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="quotagate-admin"`)
		http.Error(w, "admin token required", http.StatusUnauthorized)
		return
	}
	raw, ok := strings.CutPrefix(r.URL.EscapedPath(), AdminPrefix)
	identity, err := url.PathUnescape(raw)
	if !ok || err != nil || identity == "" {
		http.Error(w, "want "+AdminPrefix+"{identity}", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	switch r.Method {
	case http.MethodGet:
		out := make(map[string]adminLimit, len(h.limiters))
		for i, l := range h.limiters {
			d, err := l.Peek(ctx, identity)
			if err != nil {
				adminError(w, err)
				return
			}
			out[h.names[i]] = adminLimit{Allowed: d.Allowed, Outcome: string(d.Outcome), Identity: d.Identity(), Limit: d.Limit,
				Remaining: d.Remaining, ResetAfterMS: d.ResetAfter.Milliseconds(), RetryAfterMS: d.RetryAfter.Milliseconds(), Blocked: d.Blocked}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	case http.MethodDelete:
		for _, l := range h.limiters {
			if err := l.Reset(ctx, identity); err != nil {
				adminError(w, err)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, DELETE")
		http.Error(w, "GET or DELETE", http.StatusMethodNotAllowed)
	}
}

// adminError answers an admin call the engine refused (400) or the store
// failed (503).
func adminError(w http.ResponseWriter, err error) {
	status := http.StatusServiceUnavailable
	if errors.Is(err, limit.ErrInvalidIdentity) {
		status = http.StatusBadRequest
	}
	http.Error(w, err.Error(), status)
}
