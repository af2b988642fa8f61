package limit

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// identity derives whose allowance r draws on and leaves its key form in
// sc.id. First match wins:
//  1. Policy.KeyFunc returning a non-blank string (errors and blank fall
//     through; a panic is recovered and reported as IssueKeyFuncPanic);
//  2. the socket peer address, normalised (see appendAddr);
//  3. nothing: the shared fallback bucket, reported as IssueNoClientAddress.
func (l *Limiter) identity(r *Request, bucket string, sc *scratch) KeySource {
	if l.policy.KeyFunc != nil {
		if id := l.callKeyFunc(r, bucket); id != "" {
			sc.id = l.appendIdentity(sc.id[:0], id)
			return KeySourceKeyFunc
		}
	}
	if a, ok := ParseAddr(r.Peer); ok {
		sc.id = l.appendAddr(sc.id[:0], a)
		return KeySourceSocket
	}
	l.issue(bucket, IssueNoClientAddress)
	sc.id = appendFallback(sc.id[:0])
	return KeySourceFallback
}

// appendFallback appends the identity of the shared fallback bucket: the
// empty raw identity, which no KeyFunc (blank falls through) and no address
// can produce.
func appendFallback(buf []byte) []byte { return append(buf, "r:"...) }

// callKeyFunc runs Policy.KeyFunc, turning a panic into a fall-through.
func (l *Limiter) callKeyFunc(r *Request, bucket string) (id string) {
	defer func() {
		if p := recover(); p != nil {
			id = ""
			l.cfg.observer.ClientAddressIssue(bucket, IssueKeyFuncPanic)
			if l.cfg.gates.issue(IssueKeyFuncPanic).allow(10 * time.Minute) {
				l.cfg.logger.Error("quotagate: KeyFunc panicked; identity falls through to the client address (logged at most once per 10 minutes)",
					slog.String("bucket", bucket), slog.String("panic", sanitize(fmt.Sprint(p))))
			}
		}
	}()
	id, err := l.policy.KeyFunc(*r)
	if err != nil || strings.TrimSpace(id) == "" {
		return ""
	}
	return id
}

// ParseAddr parses a socket peer or forwarded address: "ip", "ip:port",
// "[ipv6]:port", with an optional IPv6 zone. It drops the port and the zone
// and unmaps IPv4-mapped IPv6 (::ffff:192.0.2.1 is 192.0.2.1). The unspecified
// addresses 0.0.0.0 and :: are not client addresses: ok is false for them and
// for anything unparseable. It does not allocate.
func ParseAddr(s string) (netip.Addr, bool) {
	// Pick the one parser that fits the shape, so that a well-formed address
	// never meets a failing parser (netip's errors allocate): a port follows
	// "]:" or the only ':' of an IPv4 address; several ':' without brackets
	// are a bare IPv6 address.
	var a netip.Addr
	var err error
	switch {
	case len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']':
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	case strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	a = a.WithZone("").Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// appendAddr appends the key form of a client address: grouped by the
// configured prefix (IPv4 /32 and IPv6 /64 by default), so that rotating
// addresses inside one IPv6 /64 does not escape the limit.
func (l *Limiter) appendAddr(buf []byte, a netip.Addr) []byte {
	bits := l.cfg.ipv6Bits
	if a.Is4() {
		bits = l.cfg.ipv4Bits
	}
	if bits < a.BitLen() {
		if p, err := a.Prefix(bits); err == nil {
			a = p.Addr()
		}
	}
	if l.cfg.hashKeys {
		return l.appendIdentity(buf, a.String())
	}
	buf = append(buf, "r:"...)
	return a.AppendTo(buf)
}

// sanitize makes untrusted text safe for a log line: control bytes become
// '?', and it is cut to 200 bytes.
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
