package limit

import (
	"net/netip"
)

// who is whose allowance a request draws on, before key.go spells it
// into a store key. Exactly one of text and addr is set, except for the
// fallback identity, which has neither.
type who struct {
	src KeySource
	// text is the application's identity (KeySourceKeyFunc,
	// KeySourceConsume), or the canonical text of a plain IPv4 socket peer
	// (KeySourceSocket on the fast path).
	text string
	// addr is the client address, grouped by the configured prefix
	// (KeySourceHeader, KeySourceSocket).
	addr netip.Addr
}

// fallbackWho is the identity of requests without one: the shared
// fallback bucket.
var fallbackWho = who{src: KeySourceFallback}

// identify derives whose allowance r draws on. First match wins:
//  1. Policy.KeyFunc returning a non-blank string (errors and blank fall
//     through; a panic is recovered and reported as Issue "key-func-panic");
//  2. the trusted client-address header, when WithTrustedHeader or
//     WithTrustedProxies is configured and it yields an address (see
//     trustConfig.resolve; problems are reported as trusted-header-missing or
//     trusted-header-unusable and fall through);
//  3. the socket peer address;
//  4. nothing: the shared fallback bucket, reported as Issue "no-client-address".
//
// Addresses are grouped by the configured prefixes (IPv4 /32 and IPv6 /64 by
// default), so that rotating addresses inside one IPv6 /64 does not escape
// the limit. Without a trust configuration no header is read, and the whole
// derivation allocates nothing.
func (l *Limiter) identify(r *Request, bucket string) who {
	if l.policy.KeyFunc != nil {
		if id := l.callKeyFunc(r, bucket); id != "" {
			return who{src: KeySourceKeyFunc, text: id}
		}
	}
	if l.plainV4 { // the peer is the only source: take its canonical IPv4 text as is
		if host, ok := canonicalIPv4(r.Peer); ok {
			return who{src: KeySourceSocket, text: host}
		}
	}
	peer, peerOK := parsePeer(r.Peer)
	t := &l.cfg.trust
	ca := t.resolve(r.Header, peer, peerOK)
	if ca.issue != "" {
		l.cfg.rep.trustIssue(bucket, t, ca)
	}
	if ca.src == "" {
		l.cfg.rep.issue(bucket, issueNoClientAddress)
		return fallbackWho
	}
	return who{src: ca.src, addr: l.group(ca.addr)}
}

// group masks a to the configured prefix of its family.
func (l *Limiter) group(a netip.Addr) netip.Addr {
	bits := l.cfg.ipv6Bits
	if a.Is4() {
		bits = l.cfg.ipv4Bits
	}
	if bits < a.BitLen() {
		if p, err := a.Prefix(bits); err == nil {
			return p.Addr()
		}
	}
	return a
}
