package limit

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// identity derives whose allowance r draws on and leaves its key form in
// sc.id. First match wins:
//  1. Policy.KeyFunc returning a non-blank string (errors and blank fall
//     through; a panic is recovered and reported as IssueKeyFuncPanic);
//  2. the trusted client-address header, when WithTrustedHeader or
//     WithTrustedProxies is configured and it yields an address (see
//     trustConfig.resolve; problems are reported as trusted-header-missing or
//     trusted-header-unusable and fall through);
//  3. the socket peer address;
//  4. nothing: the shared fallback bucket, reported as IssueNoClientAddress.
//
// Addresses are normalised and grouped by appendAddr. Without a trust
// configuration no header is read, and the whole derivation allocates nothing.
func (l *Limiter) identity(r *Request, bucket string, sc *scratch) KeySource {
	if l.policy.KeyFunc != nil {
		if id := l.callKeyFunc(r, bucket); id != "" {
			sc.id = l.appendIdentity(sc.id[:0], id)
			return KeySourceKeyFunc
		}
	}
	if l.plainV4 { // the peer is the only source: take its canonical IPv4 text as is
		if host, ok := canonicalIPv4(r.Peer); ok {
			sc.id = append(append(sc.id[:0], "r:"...), host...)
			return KeySourceSocket
		}
	}
	peer, peerOK := ParseAddr(r.Peer)
	ca := l.cfg.trust.resolve(r.Header, peer, peerOK)
	if ca.issue != "" {
		l.trustIssue(bucket, ca)
	}
	if ca.src != "" {
		sc.id = l.appendAddr(sc.id[:0], ca.addr)
		return ca.src
	}
	l.issue(bucket, IssueNoClientAddress)
	sc.id = appendFallback(sc.id[:0])
	return KeySourceFallback
}

// trustIssue reports a trusted-header issue: an event every time, a log line
// at most once per 10 minutes per kind, naming the header and quoting a
// bounded, sanitised piece of the offending text.
func (l *Limiter) trustIssue(bucket string, ca clientAddr) {
	l.cfg.observer.ClientAddressIssue(bucket, ca.issue)
	if !l.cfg.gates.allowIssue(ca.issue) {
		return
	}
	t := &l.cfg.trust
	msg := "quotagate: trusted-header-missing: the trusted header was absent or held fewer hops than configured; keyed on the socket peer (this kind is logged at most once per 10 minutes)"
	if ca.issue == IssueTrustedHeaderUnusable {
		msg = "quotagate: trusted-header-unusable: the trusted header held no usable address at the hop read; keyed on the nearest trusted address (this kind is logged at most once per 10 minutes)"
	}
	attrs := []slog.Attr{
		slog.String("bucket", sanitize(bucket)),
		slog.String("issue", string(ca.issue)),
		slog.String("header", t.header),
	}
	if t.mode == trustHeader {
		attrs = append(attrs, slog.Int("hops", t.hops))
	}
	if ca.detail != "" {
		attrs = append(attrs, slog.String("entry", sanitize(ca.detail)))
	}
	l.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
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
// "[ipv6]", "[ipv6]:port", each IPv6 form with an optional zone. It drops the
// port and the zone and unmaps IPv4-mapped IPv6 (::ffff:192.0.2.1 is
// 192.0.2.1). The unspecified addresses 0.0.0.0 and :: are not client
// addresses: ok is false for them and for anything unparseable (a host name,
// a port outside 0..65535, a zone on IPv4, brackets around IPv4, more than
// 100 bytes). It does not allocate for valid input and is safe for concurrent
// use.
func ParseAddr(s string) (netip.Addr, bool) {
	return parseAddrText(s, false)
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
		var text [64]byte // the longest address text is 39 bytes: no allocation
		return appendDigest(buf, a.AppendTo(text[:0]))
	}
	buf = append(buf, "r:"...)
	return a.AppendTo(buf)
}

// sanitize makes untrusted text safe for a log line: it is cut to 200 bytes
// and every rune that is not printable (C0 and C1 controls, DEL, line and
// paragraph separators, bidirectional and other format characters, invalid
// UTF-8) becomes '?'.
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}
