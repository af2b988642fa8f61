package limit

import (
	"sync/atomic"
	"time"
)

// logGate lets one log line through per period, lock-free.
type logGate struct{ last atomic.Int64 }

func (g *logGate) allow(every time.Duration) bool {
	now := time.Now().UnixNano()
	last := g.last.Load()
	if last != 0 && now-last < int64(every) {
		return false
	}
	return g.last.CompareAndSwap(last, now)
}

// logGates holds one gate per reported kind; shared by the Limiters built
// from one New (and With).
type logGates struct {
	store  logGate
	issues [9]logGate
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
