package limit

import (
	"net/netip"
	"strings"
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
	if l.plainV4 {
		if host, ok := canonicalIPv4(r.Peer); ok {
			sc.id = append(append(sc.id[:0], "r:"...), host...)
			return KeySourceSocket
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
			l.policyFuncFailed(bucket, IssueKeyFuncPanic, "KeyFunc panicked; identity falls through to the client address", p)
		}
	}()
	id, err := l.policy.KeyFunc(*r)
	if err != nil || strings.TrimSpace(id) == "" {
		return ""
	}
	return id
}

// canonicalIPv4 is the fast path for the most common peer, "a.b.c.d:port"
// in canonical form (no leading zeros): it returns "a.b.c.d", which is
// exactly what ParseAddr + AppendTo would produce, without parsing into a
// netip.Addr. Anything else (IPv6, zones, odd forms, 0.0.0.0) returns false
// and takes the general path.
func canonicalIPv4(s string) (string, bool) {
	i, octets, zero := 0, 0, true
	for octets < 4 {
		start, v := i, 0
		for i < len(s) && i-start < 3 && s[i] >= '0' && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
		}
		n := i - start
		if n == 0 || v > 255 || (n > 1 && s[start] == '0') {
			return "", false
		}
		if v != 0 {
			zero = false
		}
		octets++
		if octets < 4 {
			if i >= len(s) || s[i] != '.' {
				return "", false
			}
			i++
		}
	}
	if zero {
		return "", false // 0.0.0.0 is not a client address
	}
	host := s[:i]
	if i == len(s) {
		return host, true
	}
	if s[i] != ':' || i+1 == len(s) {
		return "", false
	}
	port := 0
	for _, c := range []byte(s[i+1:]) {
		if c < '0' || c > '9' {
			return "", false
		}
		if port = port*10 + int(c-'0'); port > 65535 {
			return "", false
		}
	}
	return host, true
}

// ParseAddr parses a socket peer or forwarded address: "ip", "ip:port",
// "[ipv6]:port", with an optional IPv6 zone. It drops the port and the zone
// and unmaps IPv4-mapped IPv6 (::ffff:192.0.2.1 is 192.0.2.1). The unspecified
// addresses 0.0.0.0 and :: are not client addresses: ok is false for them and
// for anything unparseable. It does not allocate for a valid address or an
// empty string (netip's parse errors allocate, so "" is answered first).
func ParseAddr(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil {
			return netip.Addr{}, false
		}
	} else if a, err = netip.ParseAddr(s); err != nil {
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
