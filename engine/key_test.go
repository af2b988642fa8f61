package limit

import (
	"strings"
	"testing"
)

// The window phase is stable for one identity, spread over the window
// between identities, and 0 with AlignWindows (phaseMS 0).
func TestFixedWindowPhasePerIdentity(t *testing.T) {
	k := keyer{prefix: "quotagate", state: "1p60f", phaseMS: 60_000}
	bucket := newBucketRef("1p60f")
	phase := func(k *keyer, id string) int64 {
		_, ph := k.appendKey(nil, &bucket, &who{src: KeySourceKeyFunc, text: id})
		return ph
	}
	if first, again := phase(&k, "198.51.100.1"), phase(&k, "198.51.100.1"); first != again {
		t.Fatal("phase is not stable for one identity")
	}
	seen := map[int64]bool{}
	for _, id := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "2001:db8::", "user-42"} {
		ph := phase(&k, id)
		if ph < 0 || ph >= 60_000 {
			t.Fatalf("phase %d outside the window", ph)
		}
		seen[ph] = true
	}
	if len(seen) < 4 {
		t.Fatalf("phases barely differ between identities: %v", seen)
	}
	aligned := keyer{prefix: "quotagate", state: "1p60fa"}
	if ph := phase(&aligned, "198.51.100.1"); ph != 0 {
		t.Fatalf("AlignWindows phase %d, want 0", ph)
	}
}

// The tag of a key is the Redis Cluster hash tag: 8 hex digits in the first
// braces, the same for one (bucket, identity), and the key ends in the
// identity's key form.
func TestKeyTag(t *testing.T) {
	k := keyer{prefix: "app", state: "5p60"}
	b := newBucketRef("/v1/{a} 5p60")
	key, _ := k.appendKey(nil, &b, &who{src: KeySourceSocket, text: "192.0.2.1"})
	again, _ := k.appendKey(make([]byte, 0, 8), &b, &who{src: KeySourceSocket, text: "192.0.2.1"})
	s := string(key)
	if s != string(again) || !strings.HasPrefix(s, "app:{") || s[13] != '}' || !strings.HasSuffix(s, ":/v1/{a} 5p60:5p60:r:192.0.2.1") {
		t.Fatalf("key %q (again %q)", key, again)
	}
	for _, c := range s[5:13] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			t.Fatalf("tag %q is not hex", s[5:13])
		}
	}
}
