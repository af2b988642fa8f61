package limit

import (
	"testing"
	"time"
)

func TestRetryAfterSecondsRoundsUp(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want int64
	}{
		{"9.5s_is_10", 9500 * time.Millisecond, 10},
		{"0.3s_is_1", 300 * time.Millisecond, 1},
		{"exact_second", 2 * time.Second, 2},
		{"one_ms_over", 2001 * time.Millisecond, 3},
		{"zero_is_1", 0, 1},
		{"negative_is_1", -time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryAfterSeconds(tt.in); got != tt.want {
				t.Fatalf("retryAfterSeconds(%v) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestRetryAfterSecondsOfADecision(t *testing.T) {
	if got := RetryAfterSeconds(Decision{RetryAfter: 9500 * time.Millisecond}); got != 10 {
		t.Fatalf("RetryAfterSeconds(9.5 s) = %d, want 10", got)
	}
}
