package limit

import (
	"sync/atomic"
	"time"
)

// logGate lets one log line through per period, lock-free.
type logGate struct{ last atomic.Int64 }

// allow reports whether a line may be logged at now (Unix ns): the first call,
// and then the first call at least every after the last admitted one. Of
// concurrent callers exactly one wins.
func (g *logGate) allow(now int64, every time.Duration) bool {
	last := g.last.Load()
	if last != 0 && now-last < int64(every) {
		return false
	}
	return g.last.CompareAndSwap(last, now)
}

// logGates holds one gate per reported kind; shared by the Limiters built
// from one New (and With).
type logGates struct {
	now    func() time.Time // nil: time.Now; tests set a fake clock
	store  logGate
	issues [9]logGate
}

// Log periods: store failures at most once per storeLogEvery, each
// client-address issue kind at most once per issueLogEvery.
const (
	storeLogEvery = 10 * time.Second
	issueLogEvery = 10 * time.Minute
)

func (g *logGates) clock() int64 {
	if g.now != nil {
		return g.now().UnixNano()
	}
	return time.Now().UnixNano()
}

// allowStore reports whether a store failure may be logged now.
func (g *logGates) allowStore() bool { return g.store.allow(g.clock(), storeLogEvery) }

// allowIssue reports whether an issue of this kind may be logged now.
func (g *logGates) allowIssue(kind Issue) bool {
	return g.issue(kind).allow(g.clock(), issueLogEvery)
}

func (g *logGates) issue(kind Issue) *logGate {
	switch kind {
	case IssueTrustedHeaderMissing:
		return &g.issues[0]
	case IssueTrustedHeaderUnusable:
		return &g.issues[1]
	case IssueNoClientAddress:
		return &g.issues[2]
	case IssueRouteUnknown:
		return &g.issues[3]
	case IssueKeyFuncPanic:
		return &g.issues[4]
	case IssueSkipPanic:
		return &g.issues[5]
	case IssueHookPanic:
		return &g.issues[6]
	case IssueDenyResponseFallback:
		return &g.issues[7]
	}
	return &g.issues[8]
}
