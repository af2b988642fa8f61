package limit

import (
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
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

// BenchHeader is one configuration of the identity benchmarks.
type BenchHeader struct {
	Name string
	Opt  Option
	Hdr  http.Header
}

// BenchHeaders are the forwarding headers of the parse-cost benchmarks: each
// configuration with a short header and with the same rightmost members
// behind 1 MB of client-supplied members. (Exported for the external test
// package's BenchmarkCheckIdentity.)
func BenchHeaders() []BenchHeader {
	mb := strings.Repeat("6.6.6.6, ", (1<<20)/9)
	mbFwd := strings.Repeat("for=6.6.6.6, ", (1<<20)/13)
	cidr := WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))
	return []BenchHeader{
		{"xff_hops2/short", WithTrustedHeader("X-Forwarded-For", 2), http.Header{hXForwardedFor: {"203.0.113.9, 10.0.0.1"}}},
		{"xff_hops2/1MB", WithTrustedHeader("X-Forwarded-For", 2), http.Header{hXForwardedFor: {mb + "203.0.113.9, 10.0.0.1"}}},
		{"forwarded_hops2/short", WithTrustedHeader("Forwarded", 2), http.Header{hForwarded: {`for="203.0.113.9:4711";proto=https, for=10.0.0.1`}}},
		{"forwarded_hops2/1MB", WithTrustedHeader("Forwarded", 2), http.Header{hForwarded: {mbFwd + `for="203.0.113.9:4711";proto=https, for=10.0.0.1`}}},
		{"proxies/short", cidr, http.Header{hXForwardedFor: {"203.0.113.9, 10.0.0.1"}}},
		{"proxies/1MB", cidr, http.Header{hXForwardedFor: {mb + "203.0.113.9, 10.0.0.1"}}},
		{"proxies_all_trusted/1MB", cidr, http.Header{hXForwardedFor: {strings.Repeat("10.1.1.1, ", (1<<20)/10) + "10.0.0.1"}}},
	}
}
