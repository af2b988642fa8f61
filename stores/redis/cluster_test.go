package redisstore

import "testing"

// hashSlot agrees with CLUSTER KEYSLOT of Redis 7.0 (values read from a
// server): the whole key without a hash tag, the first "{...}" with
// something inside otherwise.
func TestHashSlotAsRedis(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789":            12739,
		"foo":                  12182,
		"{user1000}.following": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363,
		"foo{{bar}}zap":        4015,
		"foo{bar}{zap}":        5061,
		"{a":                   10276,
		"quotagate:{1a2b3c4d}:login:5p60f:r:192.0.2.1": 9114,
	} {
		if got := hashSlot([]byte(key)); got != want {
			t.Errorf("hashSlot(%q) = %d, want %d", key, got, want)
		}
	}
}
