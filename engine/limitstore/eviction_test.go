package limitstore

import "testing"

func TestEvictionPolicyLabel(t *testing.T) {
	for in, want := range map[string]string{
		"allkeys-lru": "allkeys-lru", "volatile-ttl": "volatile-ttl", "noeviction": "noeviction",
		"": "unknown", "made-up\xff": "other", "ALLKEYS-LRU": "other",
	} {
		if got := EvictionPolicyLabel(in); got != want {
			t.Errorf("EvictionPolicyLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
