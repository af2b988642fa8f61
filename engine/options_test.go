package limit_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// panicHandler is a slog.Handler whose Handle panics (a broken sink, e.g. a
// handler writing to a closed pipe that panics instead of returning an error).
type panicHandler struct{}

func (panicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panicHandler) Handle(context.Context, slog.Record) error { panic("log sink broken") }
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panicHandler) WithGroup(string) slog.Handler           { return h }

// DESIGN (Policy): "Nothing in the request path panics." The engine guarded
// every other caller-supplied component on the request path (KeyFunc, Skip,
// CostFunc, hooks, LimitedResponse, the Observer, the Store), but not the
// Logger: the first request with no client address (or a trusted-header
// issue, a store failure, a route-unknown fallback...) logs, and a panicking
// slog handler took the request down (under fiber/fasthttp, which recovers
// nothing by default, the whole process).
func TestPanickingLoggerNeverPanicsInTheRequestPath(t *testing.T) {
	l, err := limit.New(limittest.NewStore(nil), limit.Policy{}, limit.WithLogger(slog.New(panicHandler{})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("Check panicked: %v", p)
		}
	}()
	check(l, context.Background(), limit.Request{Peer: ""}) // no client address: logged once per 10 min
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  limit.Option
	}{
		{"prefix_with_brace", limit.WithKeyPrefix("a{b")},
		{"prefix_with_colon", limit.WithKeyPrefix("a:b")},
		{"prefix_empty", limit.WithKeyPrefix("")},
		{"nil_logger", limit.WithLogger(nil)},
		{"nil_observer", limit.WithObserver(nil)},
		{"divisor_zero", limit.WithFallbackDivisor(0)},
		{"ipv4_prefix_33", limit.WithAddressPrefixes(33, 64)},
		{"ipv6_prefix_0", limit.WithAddressPrefixes(32, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := limit.New(storeAt(0), limit.Policy{}, tt.opt); !errors.Is(err, limit.ErrInvalidOption) {
				t.Fatalf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := limit.New(nil, limit.Policy{}); err == nil {
		t.Fatal("New(nil store): want an error")
	}
}
