package limittest

import (
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

// MustNew is limit.New for tests and fixtures whose policy is known to be
// valid: it panics on error.
func MustNew(s limitstore.Store, p limit.Policy, opts ...limit.Option) *limit.Limiter {
	l, err := limit.New(s, p, opts...)
	if err != nil {
		panic(err)
	}
	return l
}
