package limit

import (
	"github.com/quotagate/quotagate/engine/limitstore"
	"sync/atomic"
	"time"
)

// Hooks into the engine's internals for the external tests (package
// limit_test, which can use the limittest doubles; this package's own tests
// cannot import limittest, which imports it).

// Identify runs l's identity derivation for r (issues are reported as
// usual) and returns the key source and the identity's key form ("r:..." or
// "h:...").
func Identify(l *Limiter, r Request) (KeySource, string) {
	r.lim = l
	id := l.identify(&r, l.shared.name)
	return id.src, string(l.keys.appendIdentity(nil, &id))
}

// SetLogClock sets the clock of the log gates that l shares with the
// Limiters derived from the same New.
func SetLogClock(l *Limiter, now func() time.Time) { l.cfg.rep.now = now }

// ScratchObjects is how many objects one refill of a Limiter's scratch pool
// allocates (the scratch and its key buffer).
const ScratchObjects = 2

// CountScratchRefills makes l count the refills of its scratch pool into
// the returned counter. Allocation guards subtract ScratchObjects per refill:
// sync.Pool drops items at random under -race, and a GC may empty it.
func CountScratchRefills(l *Limiter) *atomic.Int64 {
	n := new(atomic.Int64)
	orig := l.scratch.New
	l.scratch.New = func() any { n.Add(1); return orig() }
	return n
}

// ApplyOne is applyOne, for the external tests.
var ApplyOne = applyOne

// applyOne applies a one-quota op (Quotas[0]) to st at now: the new State
// (st itself when limited) and the quota's answer.
func applyOne(op *limitstore.Op, st limitstore.State, now int64) (limitstore.State, limitstore.QuotaResult) {
	sts := [limitstore.MaxQuotas]limitstore.State{st}
	res := op.Apply(&sts, now)
	return sts[0], res.Quotas[0]
}

// WithoutTicket returns d without what Finish would give back, so that
// Decisions of separate Limiters compare equal.
func WithoutTicket(d Decision) Decision { d.charge = charge{}; return d }
