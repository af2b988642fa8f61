package limitclient

import (
	"strings"
	"sync"
	"sync/atomic"
)

// partition is one partition's state: the instant until which its quota is
// spent, in nanoseconds on the transport's clock since New (0: never).
type partition struct {
	until atomic.Int64
}

// extend moves until to at least t (never earlier: a concurrent response
// that arrives late cannot shorten a wait the server asked for).
func (p *partition) extend(t int64) {
	for {
		cur := p.until.Load()
		if cur >= t || p.until.CompareAndSwap(cur, t) {
			return
		}
	}
}

// partitions maps partition keys to their state. A lookup takes the read
// lock only and allocates nothing; a partition is created only when a
// response says its quota is spent, so that a partition without a known
// limit costs no memory.
type partitions struct {
	mu  sync.RWMutex
	m   map[string]*partition // guarded by mu
	max int
}

// get returns the partition of key, or nil when none is remembered.
func (ps *partitions) get(key string) *partition {
	ps.mu.RLock()
	p := ps.m[key]
	ps.mu.RUnlock()
	return p
}

// create returns the partition of key, creating it; nil when the map is full
// and no partition's wait is over at now.
func (ps *partitions) create(key string, now int64) *partition {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[key]; p != nil {
		return p
	}
	if ps.m == nil {
		ps.m = make(map[string]*partition)
	}
	if len(ps.m) >= ps.max {
		for k, p := range ps.m {
			if p.until.Load() <= now {
				delete(ps.m, k)
			}
		}
		if len(ps.m) >= ps.max {
			return nil
		}
	}
	p := &partition{}
	ps.m[strings.Clone(key)] = p // key may point into the caller's request
	return p
}
