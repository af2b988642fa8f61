package limit

import (
	"reflect"
	"runtime"
	"sync"
	"time"
	"weak"
)

// storeShared is what every Limiter on one Store shares, whichever New built
// it: the circuit breaker, the local deny cache, the liveness clock the
// store timeout reads, and the deadlines of calls that start close together
// (one set per store timeout). Limiters from one New (and its With) share it
// through their storeRef; Limiters built by separate New calls on the same
// Store find it in the process-wide registry (sharedFor).
//
// It lives as long as a Limiter refers to it: the registry holds it weakly,
// and a cleanup removes the registry entry (and with it the registry's
// reference to the Store) once it has been collected.
type storeShared struct {
	name    string
	io      bool         // the store does I/O: breaker, deny cache and deadlines apply
	clock   func() int64 // monotonic ns; nil: monoNow (tests set a fake)
	breaker breaker
	deny    *denyCache // nil for an in-process store

	mu    sync.Mutex
	ticks map[time.Duration]*tickSource
}

// now reads the store's clock: monotonic nanoseconds since the process
// started (or a test's fake).
func (s *storeShared) now() int64 {
	if s.clock != nil {
		return s.clock()
	}
	return monoNow()
}

// monoStart anchors monoNow: time.Since reads the monotonic clock.
var monoStart = time.Now()

// monoNow is the monotonic clock in nanoseconds since the process started.
func monoNow() int64 { return int64(time.Since(monoStart)) }

// tickSource returns the deadline source of calls under timeout; created
// at New, never on the request path.
func (s *storeShared) tickSource(timeout time.Duration) *tickSource {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.ticks[timeout]; ts != nil {
		return ts
	}
	if s.ticks == nil {
		s.ticks = map[time.Duration]*tickSource{}
	}
	ts := &tickSource{timeout: int64(timeout), shared: s}
	s.ticks[timeout] = ts
	return ts
}

// registry maps a Store to its storeShared, weakly (see storeShared).
var registry struct {
	sync.Mutex
	m map[any]weak.Pointer[storeShared]
}

// sharedFor returns the storeShared of s, creating it on first use. Only
// stores whose dynamic type is a pointer are looked up (every store of this
// project, and any Store with state, is one): other values may not be
// comparable, and two equal values would not be one store anyway; they get a
// storeShared of their own, shared by the Limiters of one New only.
func sharedFor(s Store, info StoreInfo) *storeShared {
	if t := reflect.TypeOf(s); t == nil || t.Kind() != reflect.Pointer {
		return newStoreShared(info)
	}
	registry.Lock()
	defer registry.Unlock()
	if p, ok := registry.m[s]; ok {
		if sh := p.Value(); sh != nil {
			return sh
		}
	}
	sh := newStoreShared(info)
	if registry.m == nil {
		registry.m = map[any]weak.Pointer[storeShared]{}
	}
	wp := weak.Make(sh)
	registry.m[s] = wp
	runtime.AddCleanup(sh, func(key any) {
		registry.Lock()
		defer registry.Unlock()
		if registry.m[key] == wp { // not replaced by a newer one since
			delete(registry.m, key)
		}
	}, any(s))
	return sh
}

func newStoreShared(info StoreInfo) *storeShared {
	sh := &storeShared{name: info.Name, io: !info.InProcess}
	sh.breaker.lastSuccess.Store(never)
	if sh.io && !info.InjectedClock {
		sh.deny = newDenyCache()
	}
	return sh
}
