package otellimit

import (
	"maps"
	"sync"
	"sync/atomic"
)

// maxCached bounds each cache of resolved attribute sets. Attribute values
// come from configuration (bucket names, route templates) and closed sets,
// so a real application has far fewer sets; past the bound events are still
// recorded, only with an attribute set built on every call (which
// allocates).
const maxCached = 4096

// cache maps an attribute set's values to its measurement options, the way sync.Map
// does but with typed keys (a struct of strings as a map key is looked up
// without allocating; sync.Map's any keys would box it).
//
// read is an immutable map behind an atomic pointer: a hit takes no lock.
// dirty holds every cached entry under mu; lookups that miss read and find
// the entry in dirty are counted, and once they reach len(dirty) dirty is
// copied into a new read map. Each new label set therefore costs amortised
// O(1) copying, and a label set seen often enough is served lock-free.
type cache[K comparable, V any] struct {
	read   atomic.Pointer[map[K]V]
	mu     sync.Mutex
	dirty  map[K]V // every cached entry; guarded by mu
	misses int     // read misses found in dirty since the last promotion
}

// get returns the child cached for k.
func (c *cache[K, V]) get(k K) (V, bool) {
	if m := c.read.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v, true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.dirty[k]
	if ok {
		c.missLocked()
	}
	return v, ok
}

// put caches v for k (k must hold no borrowed strings) unless the cache is
// full; when k is already cached it returns the cached value instead.
func (c *cache[K, V]) put(k K, v V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.dirty[k]; ok {
		return cur
	}
	if len(c.dirty) >= maxCached {
		return v
	}
	if c.dirty == nil {
		c.dirty = make(map[K]V)
	}
	c.dirty[k] = v
	c.missLocked()
	return v
}

// missLocked counts a lookup that read could not answer and promotes dirty
// to read once such lookups have cost as much as copying dirty would.
func (c *cache[K, V]) missLocked() {
	c.misses++
	if c.misses < len(c.dirty) {
		return
	}
	m := maps.Clone(c.dirty)
	c.read.Store(&m)
	c.misses = 0
}
