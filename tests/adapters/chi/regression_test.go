package chilimit_test

// Regression tests for faults found by trying to break the product: each
// failed before its fix.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chilimit "github.com/quotagate/quotagate/adapters/chi"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// A global r.Use(a) and r.With(b) on /double, a and b built separately
// from one FixedWindow 5 per minute policy with no Name: both would count
// each request in one record (the default bucket is the signature), so 6
// GETs admitted 2, with two identical "5p60f" members in RateLimit. The
// memory store keeps Claims, so New refuses b, saying to set distinct Names
// or reuse a; with distinct Names each mount has its own allowance: 5 of 6
// admitted.
func TestRegressionIdenticalLimitersOnStackedMounts(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	p := limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
	a := limittest.MustNew(store, p)
	if _, err := limit.New(store, p); !errors.Is(err, limit.ErrInvalidPolicy) || !strings.Contains(err.Error(), "distinct Names") {
		t.Fatalf("b built separately from a's policy: %v, want New to refuse it", err)
	}
	_ = a
	run := func(a, b *limit.Limiter) int {
		var c counter
		r := chi.NewRouter()
		r.Use(chilimit.Middleware(a))
		r.With(chilimit.Middleware(b)).Get("/double", c.handler(200, "ok"))
		admitted := 0
		for i := 0; i < 6; i++ {
			if limittest.Serve(r, "GET", "/double", "192.0.2.40:1234").Code == 200 {
				admitted++
			}
		}
		return admitted
	}
	outer, inner := p, p
	outer.Name, inner.Name = "outer", "inner"
	if n := run(limittest.MustNew(newStore(), outer), limittest.MustNew(newStore(), inner)); n != 5 {
		t.Fatalf("distinct Names: %d of 6 admitted, want 5", n)
	}
}
