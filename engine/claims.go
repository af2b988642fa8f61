package limit

import "github.com/quotagate/quotagate/engine/limitstore"

import "fmt"

// claimer is a Store that records its unnamed Limiters (see
// limitstore.Claims).
type claimer interface {
	Claim(key string) bool
}

// claim records l, an unnamed Limiter, with its Store when the Store keeps
// limitstore.Claims, or returns the error that refuses it. Named Limiters share on
// purpose and are not recorded.
func (l *Limiter) claim(s limitstore.Store) error {
	c, ok := s.(claimer)
	if !ok || l.policy.Name != "" {
		return nil
	}
	if c.Claim(l.cfg.keyPrefix + ":" + l.shared.name + ":" + l.state) {
		return nil
	}
	return fmt.Errorf("%w: a Limiter with no Name and the same numbers (%s) was built on this Store already, so both would draw on one allowance without saying so: "+
		"set distinct Names to keep them apart (one Name on both shares on purpose), or reuse the first Limiter where one allowance is meant (one Limiter may serve several routes)",
		ErrInvalidPolicy, l.shared.name)
}
