package limit

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"weak"
)

// This file keeps two Limiters built separately from sharing one allowance
// without saying so. Every store key carries the policy's state signature
// (key.go), so policies whose numbers differ never meet in one record; what
// remains are two Limiters with the same numbers and no Name, whose default
// buckets (the signature, and for PerRoute the route plus the signature)
// coincide. New refuses the second one while the first is alive on the same
// Store value in this process, and says how to share on purpose (one Name)
// or not at all (distinct Names), or to reuse the first Limiter.
//
// The registry is per process and per Store value: keys stay the same in
// every process of a fleet (replicas of one service share their records in
// Redis, as they should), and two Store values reaching one backend (two
// redisstore.Store on one server) are not told apart. It holds weak
// pointers, so a Limiter that is dropped frees its place once collected.

// registry maps (Store, key prefix, state signature) to the live unnamed
// Limiter that uses it.
var registry = struct {
	mu   sync.Mutex
	m    map[registryKey]weak.Pointer[Limiter]
	next int // sweep dead entries when len(m) reaches next
}{m: map[registryKey]weak.Pointer[Limiter]{}, next: 64}

// registryKey names a Store by its dynamic type and pointer, never holding
// the Store itself: a dropped Store is not kept alive, and while a Limiter
// using it lives the Store does too, so its address cannot be reused for
// another one.
type registryKey struct {
	typ   reflect.Type
	ptr   uintptr
	state string // key prefix + ":" + state signature
}

// register records l, an unnamed Limiter on s, or returns the error that
// refuses it when another live unnamed Limiter has the same numbers on the
// same Store. Named Limiters share on purpose and are not recorded; a Store
// that is not a pointer (a value whose copies are not one store), or points
// to a zero-size value, is not tracked.
func register(l *Limiter, s Store) error {
	if l.policy.Name != "" {
		return nil
	}
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return nil // zero-size values may share one address: not one store
	}
	k := registryKey{typ: v.Type(), ptr: v.Pointer(), state: l.cfg.keyPrefix + ":" + l.state}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if live(k) {
		// A Limiter dropped but not yet collected must not block this one:
		// collect before refusing (a rare path: New is not per request).
		// Twice: a Limiter's scratch sync.Pool is referenced from the
		// runtime's pool list until the second collection after its last
		// use (the pool's victim cache), and the pool lives in the Limiter.
		for i := 0; i < 2 && live(k); i++ {
			registry.mu.Unlock()
			runtime.GC()
			registry.mu.Lock()
		}
		if live(k) {
			return fmt.Errorf("%w: another Limiter with no Name and the same numbers (%s) is alive on this Store, so both would draw on one allowance without saying so: "+
				"set distinct Names to keep them apart (one Name on both shares on purpose), or reuse the first Limiter where one allowance is meant (one Limiter may serve several routes)",
				ErrInvalidPolicy, l.state)
		}
	}
	registry.m[k] = weak.Make(l)
	if len(registry.m) >= registry.next {
		for k, p := range registry.m {
			if p.Value() == nil {
				delete(registry.m, k)
			}
		}
		registry.next = 2*len(registry.m) + 64
	}
	return nil
}

// live reports whether k is held by a Limiter still alive. The caller holds
// registry.mu.
func live(k registryKey) bool {
	p, ok := registry.m[k]
	return ok && p.Value() != nil
}
