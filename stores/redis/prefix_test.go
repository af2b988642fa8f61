package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestPrefixed(t *testing.T) {
	gate := fmt.Errorf("%w: 127.0.0.1:6379 did not answer", ErrReconnectBackoff)
	for _, tc := range []struct {
		name string
		in   error
		want string
		is   []error
	}{
		{"nil", nil, "", nil},
		{"sentinel_kept", ErrClosed, "redisstore: store is closed", []error{ErrClosed}},
		{"foreign_gets_it", context.DeadlineExceeded, "redisstore: context deadline exceeded", []error{context.DeadlineExceeded}},
		{"twice_at_start", fmt.Errorf("redisstore: %w", gate),
			"redisstore: not reconnecting yet: 127.0.0.1:6379 did not answer", []error{ErrReconnectBackoff}},
		{"sentinel_in_sentinel", fmt.Errorf("%w: %w", ErrNotConnected, gate),
			"redisstore: not connected to Redis yet: not reconnecting yet: 127.0.0.1:6379 did not answer", []error{ErrNotConnected, ErrReconnectBackoff}},
		{"inside_a_foreign_one", fmt.Errorf("cluster refresh: %w", gate),
			"redisstore: cluster refresh: not reconnecting yet: 127.0.0.1:6379 did not answer", []error{ErrReconnectBackoff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := prefixed(tc.in)
			if tc.in == nil {
				if got != nil {
					t.Fatalf("prefixed(nil) = %v", got)
				}
				return
			}
			if got.Error() != tc.want {
				t.Errorf("got %q, want %q", got.Error(), tc.want)
			}
			for _, target := range tc.is {
				if !errors.Is(got, target) {
					t.Errorf("errors.Is(%q, %v) is false", got, target)
				}
			}
		})
	}
	if prefixed(ErrClosed) != ErrClosed {
		t.Error("a sentinel with the prefix once is returned as it is")
	}
}
