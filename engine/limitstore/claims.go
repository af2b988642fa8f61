package limitstore

import "sync"

// Claims records the unnamed Limiters built on one Store value, so that
// limit.New refuses a second Limiter with no Name and the same numbers: both
// would draw on one allowance without saying so (an unnamed Limiter's
// bucket is its numbers). A Store opts in by embedding Claims (the memory
// and Redis stores do); limit.New then asks it through the promoted Claim
// method. The zero
// value is ready to use and safe for concurrent use.
//
// A claim lasts as long as the Store value: a Limiter rebuilt with the same
// numbers on the same Store is refused too, whether or not the first is
// still in use. Give such Limiters a Name (one Name on both shares on
// purpose, distinct Names keep them apart), or build one Limiter and mount
// it where one allowance is meant. Keys do not depend on claims, so the
// replicas of a service still share their records in a shared store.
type Claims struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// Claim records key and reports whether no earlier Claim recorded it.
func (c *Claims) Claim(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, taken := c.m[key]; taken {
		return false
	}
	if c.m == nil {
		c.m = map[string]struct{}{}
	}
	c.m[key] = struct{}{}
	return true
}
