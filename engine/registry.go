package limit

import (
	"fmt"
	"runtime"
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
// The record is the Store's storeShared (storeshared.go), so it is per
// process and per Store value: keys stay the same in every process of a
// fleet (replicas of one service share their records in Redis, as they
// should), and two Store values reaching one backend (two redisstore.Store
// on one server) are not told apart. It holds weak pointers, so a Limiter
// that is dropped frees its place once collected.

// register records l, an unnamed Limiter on s's Store, or returns the error
// that refuses it when another live unnamed Limiter has the same numbers
// and key prefix there. Named Limiters share on purpose and are not
// recorded. A Store the per-Store registry does not track (not a pointer,
// or a pointer to a zero-size value: see sharedFor) has a storeShared per
// New, so only the Limiters of one New and its With meet.
func (s *storeShared) register(l *Limiter) error {
	if l.policy.Name != "" {
		return nil
	}
	k := l.cfg.keyPrefix + ":" + l.state
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unnamed[k].Value() != nil {
		// A Limiter dropped but not yet collected must not block this one:
		// collect before refusing (a rare path: New is not per request).
		// Twice: a Limiter's scratch sync.Pool is referenced from the
		// runtime's pool list until the second collection after its last
		// use (the pool's victim cache), and the pool lives in the Limiter.
		for i := 0; i < 2 && s.unnamed[k].Value() != nil; i++ {
			s.mu.Unlock()
			runtime.GC()
			s.mu.Lock()
		}
		if s.unnamed[k].Value() != nil {
			return fmt.Errorf("%w: another Limiter with no Name and the same numbers (%s) is alive on this Store, so both would draw on one allowance without saying so: "+
				"set distinct Names to keep them apart (one Name on both shares on purpose), or reuse the first Limiter where one allowance is meant (one Limiter may serve several routes)",
				ErrInvalidPolicy, l.state)
		}
	}
	if s.unnamed == nil {
		s.unnamed = map[string]weak.Pointer[Limiter]{}
	}
	s.unnamed[k] = weak.Make(l)
	sweepWeak(s.unnamed, &s.unnamedNext)
	return nil
}

// sweepWeak deletes the entries of m whose value has been collected, once m
// has grown to *next entries, and sets the next size that sweeps: the
// per-Store registry and the unnamed-Limiter record grow with the stores
// and Limiters a process builds (tests build thousands) and shrink here.
func sweepWeak[K comparable, V any](m map[K]weak.Pointer[V], next *int) {
	if len(m) < *next {
		return
	}
	for k, p := range m {
		if p.Value() == nil {
			delete(m, k)
		}
	}
	*next = 2*len(m) + 64
}
