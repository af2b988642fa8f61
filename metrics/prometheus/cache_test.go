package promlimit

import (
	"strconv"
	"testing"
)

type testKey struct{ a, b string }

func TestCache(t *testing.T) {
	t.Parallel()
	var c cache[testKey, int]
	if _, ok := c.get(testKey{"x", "y"}); ok {
		t.Fatal("empty cache hit")
	}
	const n = maxCached + 100
	for i := range n {
		k := testKey{"k", strconv.Itoa(i)}
		if got := c.put(k, i); got != i {
			t.Fatalf("put(%v, %d) = %d", k, i, got)
		}
	}
	if got := c.put(testKey{"k", "7"}, -1); got != 7 {
		t.Errorf("put of a cached key returned %d, want the cached 7", got)
	}
	for round := range 2 {
		for i := range n {
			v, ok := c.get(testKey{"k", strconv.Itoa(i)})
			if cached := i < maxCached; ok != cached || (ok && v != i) {
				t.Fatalf("round %d: get(k%d) = %d, %v; want cached=%v", round, i, v, ok, cached)
			}
		}
	}
	// After lookups as many as the entries, every entry is served lock-free.
	read := c.read.Load()
	if read == nil || len(*read) != maxCached {
		t.Fatalf("read map holds %d entries, want all %d cached ones", len(*read), maxCached)
	}
}
