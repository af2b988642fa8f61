package limit

import (
	"reflect"
	"sync"
	"time"
	"weak"
)

// storeShared is what every Limiter on one Store shares, whichever New built
// it: the circuit breaker, the local deny cache, the liveness clock the
// store timeout reads, and the deadlines of calls that start close together
// (one set per store timeout). Limiters from one New (and its With) share it
// through their storeRef; Limiters built by separate New calls on the same
// Store find it in the process-wide registry (sharedFor). It is the one
// place for per-Store state, the record of its unnamed Limiters included
// (registry.go). It lives as long as a Limiter refers to it (the registry holds
// it weakly).
type storeShared struct {
	name    string
	io      bool         // the store does I/O: breaker, deny cache and deadlines apply
	clock   func() int64 // monotonic ns; nil: monoNow (tests set a fake)
	breaker breaker
	deny    *denyCache // nil for an in-process store

	mu    sync.Mutex
	ticks map[time.Duration]*tickSource
	// unnamed holds the live unnamed Limiters on the Store by key prefix
	// and state signature (registry.go); swept at unnamedNext entries.
	unnamed     map[string]weak.Pointer[Limiter]
	unnamedNext int
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

// stores is the per-Store registry: it maps a Store to its storeShared,
// weakly, so that Limiters built by separate New calls on one Store share
// its breaker and deny cache (and any other per-Store state: see
// storeShared). It never holds the Store itself: a Store is named by its
// dynamic type and pointer, and while a Limiter using it lives (and with it
// the storeShared), the Store does too, so its address cannot be reused for
// another one. Dead entries are swept as the map grows.
var stores = struct {
	mu   sync.Mutex
	m    map[storeID]weak.Pointer[storeShared]
	next int // sweep dead entries when len(m) reaches next
}{m: map[storeID]weak.Pointer[storeShared]{}, next: 64}

// storeID names a Store value by its dynamic type and pointer.
type storeID struct {
	typ reflect.Type
	ptr uintptr
}

// sharedFor returns the storeShared of s, creating it on first use. Only
// stores whose dynamic value is a non-nil pointer to a value of non-zero
// size are looked up (every store of this project, and any Store with
// state, is one): other values may not be comparable, equal values are not
// one store, and zero-size values may share one address. The others get a
// storeShared of their own, shared by the Limiters of one New only.
func sharedFor(s Store, info StoreInfo) *storeShared {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return newStoreShared(info)
	}
	id := storeID{typ: v.Type(), ptr: v.Pointer()}
	stores.mu.Lock()
	defer stores.mu.Unlock()
	if sh := stores.m[id].Value(); sh != nil {
		return sh
	}
	sh := newStoreShared(info)
	stores.m[id] = weak.Make(sh)
	sweepWeak(stores.m, &stores.next)
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
