package limit

import (
	"fmt"
	"net/netip"
	"net/textproto"
)

// maxTrustedHops bounds the hops of WithTrustedHeader and the length of the
// walk of WithTrustedProxies: the parse of a forwarding header examines at
// most this many members, whatever the header's length.
const maxTrustedHops = 16

// Canonical names of the list headers the engine parses as lists. Every other
// trusted header is a single-value header.
const (
	// hXForwardedFor is the de-facto X-Forwarded-For list: one address per
	// hop, each proxy appending the address it received the request from.
	hXForwardedFor = "X-Forwarded-For"
	// hForwarded is the RFC 7239 Forwarded list; the engine reads the for=
	// parameter of each forwarded-element.
	hForwarded = "Forwarded"
)

// trustMode says where, besides the socket peer, a client address may come from.
type trustMode uint8

const (
	trustNone    trustMode = iota // no header is ever read
	trustHeader                   // WithTrustedHeader
	trustProxies                  // WithTrustedProxies
)

// headerFormat is how a trusted header is read.
type headerFormat uint8

const (
	formatSingle    headerFormat = iota // one address, used as is
	formatXFF                           // X-Forwarded-For list
	formatForwarded                     // RFC 7239 list of forwarded-elements
)

// trustConfig is the trusted-proxy part of config.
type trustConfig struct {
	mode    trustMode
	header  string // canonical header name
	format  headerFormat
	hops    int            // trustHeader: the member read, counting from the right from 1
	proxies []netip.Prefix // trustProxies: masked, IPv4 prefixes in IPv4 form
}

// WithTrustedHeader makes the engine key requests on the client address that
// the trusted infrastructure in front of this server writes into the header
// name, instead of on the socket peer. It applies to the Limiter New builds
// and to those derived from it with With.
//
// name is case-insensitive. X-Forwarded-For and Forwarded (RFC 7239) are lists
// that every proxy appends to: hops is the number of proxies of yours that
// append to it (1 for a single load balancer, 2 for a CDN in front of a load
// balancer), and the client address is the hops-th member counting from the
// right. Several header lines form one list. Any other header (X-Real-IP,
// CF-Connecting-IP, True-Client-IP, Fly-Client-IP) is a single-value header,
// used as is, and hops must be 1; one that arrives with several lines or
// several addresses is unusable.
//
// Threat model: the header is trusted on every request, whoever sent it. This
// is safe only when no client can reach this server except through those hops
// proxies (a firewall or a private network guarantees it), and, for a
// single-value header, when your edge overwrites any value the client sent
// (True-Client-IP and Fastly-Client-IP pass through from clients by default
// at several CDNs). A client that reaches the server directly, or a hops
// larger than the real number of proxies, lets clients choose their bucket; a
// hops smaller than the real number keys every client on a proxy's address.
// When the proxies' addresses are known, prefer WithTrustedProxies, which
// needs neither guarantee.
//
// A header that is absent, or holds fewer members than hops, is never
// trusted: the request is keyed on the socket peer and the
// trusted-header-missing issue is reported. A member at the hop that is not
// an address (malformed, "unknown", an obfuscated "_name", longer than the
// parse bounds) is never used: the request is keyed on the socket peer and
// trusted-header-unusable is reported. Entries may carry ports and IPv6 zones,
// which are dropped; IPv4-mapped IPv6 is unmapped. The parse reads from the
// right and examines at most hops members (X-Forwarded-For members of up to
// 128 bytes, Forwarded elements of up to 512): its cost does not depend on the
// header's length, and it does not allocate for a well-formed header.
//
// Errors: a name that is not an HTTP token, hops outside 1..16, hops other
// than 1 for a single-value header, or use together with WithTrustedProxies
// (the two are exclusive). Without either option no header is ever read for
// identity.
func WithTrustedHeader(name string, hops int) Option {
	return func(c *config) error {
		if !isToken(name) {
			return fmt.Errorf("%w: WithTrustedHeader(%q, %d): the name is not an HTTP header name", ErrInvalidOption, name, hops)
		}
		if c.trust.mode == trustProxies {
			return fmt.Errorf("%w: WithTrustedHeader and WithTrustedProxies are exclusive: use one trust configuration", ErrInvalidOption)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		format := formatSingle
		switch canon {
		case hXForwardedFor:
			format = formatXFF
		case hForwarded:
			format = formatForwarded
		}
		if hops < 1 || hops > maxTrustedHops {
			return fmt.Errorf("%w: WithTrustedHeader(%q, %d): hops must be within 1..%d (the number of your proxies that append to the header)", ErrInvalidOption, name, hops, maxTrustedHops)
		}
		if format == formatSingle && hops != 1 {
			return fmt.Errorf("%w: WithTrustedHeader(%q, %d): %s is a single-value header, used as is; hops must be 1 (only %s and %s are lists)", ErrInvalidOption, name, hops, canon, hXForwardedFor, hForwarded)
		}
		c.trust = trustConfig{mode: trustHeader, header: canon, format: format, hops: hops}
		return nil
	}
}

// WithTrustedProxies makes the engine key requests that arrive from one of
// your proxies on the client address those proxies recorded in
// X-Forwarded-For. It applies to the Limiter New builds and to those
// derived from it with With.
//
// Only when the socket peer is inside one of prefixes is X-Forwarded-For read
// at all: its members (several header lines form one list) are walked from
// the right, skipping addresses inside prefixes, and the first address
// outside them is the client. A member that is not an address ends the walk
// at the nearest trusted hop (the last trusted address passed, or the peer),
// which is then the key, and the trusted-header-unusable issue is reported;
// attacker text never becomes a key. A chain whose members are all trusted
// keys on its leftmost member; a walk that passes 16 trusted members without
// meeting a client ends like a malformed member. A trusted peer that sent no
// X-Forwarded-For is the key, reported as trusted-header-missing. A peer
// outside prefixes is the key and no header is read or reported. The walk's
// cost is bounded by those 16 members, not by the header's length, and it
// does not allocate for a well-formed header.
//
// Threat model: a client can write anything left of what your proxies
// append, and can connect directly; neither matters, because only addresses
// appended by a proxy inside prefixes are believed, and a direct connection
// is keyed on its own address. It relies on prefixes holding only proxies
// that append the address they received the request from (standard for
// nginx $proxy_add_x_forwarded_for, Envoy, HAProxy, cloud load balancers),
// and on no client being inside prefixes.
//
// Prefixes are masked; IPv4-mapped IPv6 prefixes (::ffff:10.0.0.0/104) are
// converted to IPv4 (addresses are unmapped before matching). Errors: no
// prefix, an invalid prefix, a /0 prefix (it would trust every address, so
// clients would choose their own key), or use together with WithTrustedHeader
// (the two are exclusive). Without either option no header is ever read for
// identity.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(c *config) error {
		if c.trust.mode == trustHeader {
			return fmt.Errorf("%w: WithTrustedProxies and WithTrustedHeader are exclusive: use one trust configuration", ErrInvalidOption)
		}
		if len(prefixes) == 0 {
			return fmt.Errorf("%w: WithTrustedProxies(): at least one prefix is required", ErrInvalidOption)
		}
		ps := make([]netip.Prefix, 0, len(prefixes))
		for i, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("%w: WithTrustedProxies: prefix %d (%v) is invalid", ErrInvalidOption, i, p)
			}
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			if p.Bits() == 0 {
				return fmt.Errorf("%w: WithTrustedProxies: prefix %d (%v) trusts every address, which lets clients choose their own key", ErrInvalidOption, i, p)
			}
			ps = append(ps, p.Masked())
		}
		c.trust = trustConfig{mode: trustProxies, header: hXForwardedFor, format: formatXFF, proxies: ps}
		return nil
	}
}

// trusted reports whether a (unmapped, zone-free) is inside a trusted prefix.
func (t *trustConfig) trusted(a netip.Addr) bool {
	for _, p := range t.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr is where an address-based identity came from.
type clientAddr struct {
	addr   netip.Addr
	src    KeySource // KeySourceHeader or KeySourceSocket; "" when there is no address
	issue  Issue     // "" when nothing is to be reported
	detail string    // for trusted-header-unusable: a bounded piece of the offending text
}

// resolve chooses the client address of a request from its headers and its
// socket peer (peerOK false: no peer address) under the trust configuration.
// It is pure: the caller reports the issue.
func (t *trustConfig) resolve(h Header, peer netip.Addr, peerOK bool) clientAddr {
	socket := clientAddr{}
	if peerOK {
		socket = clientAddr{addr: peer, src: KeySourceSocket}
	}
	switch t.mode {
	case trustHeader:
		var lines []string
		if h != nil {
			lines = h.Values(t.header)
		}
		a, issue, detail := t.fromHeader(lines)
		if issue == "" {
			return clientAddr{addr: a, src: KeySourceHeader}
		}
		socket.issue, socket.detail = issue, detail
		return socket
	case trustProxies:
		if !peerOK || !t.trusted(peer) {
			return socket
		}
		var lines []string
		if h != nil {
			lines = h.Values(t.header)
		}
		return t.walk(lines, socket)
	}
	return socket
}

// fromHeader reads the address of a WithTrustedHeader configuration; issue
// is "" on success.
func (t *trustConfig) fromHeader(lines []string) (netip.Addr, Issue, string) {
	if t.format == formatSingle {
		switch {
		case len(lines) == 0:
			return netip.Addr{}, issueTrustedHeaderMissing, ""
		case len(lines) > 1:
			return netip.Addr{}, issueTrustedHeaderUnusable, "several header lines"
		case len(lines[0]) > maxListMember:
			return netip.Addr{}, issueTrustedHeaderUnusable, tail(lines[0])
		}
		v := trimOWS(lines[0])
		if v == "" {
			return netip.Addr{}, issueTrustedHeaderMissing, ""
		}
		if a, ok := parseAddrText(v, false); ok {
			return a, "", ""
		}
		return netip.Addr{}, issueTrustedHeaderUnusable, v
	}
	it := newListIter(lines, t.format == formatForwarded, t.hops)
	for n := 1; ; n++ {
		m, st := it.member()
		switch st {
		case memberEnd:
			return netip.Addr{}, issueTrustedHeaderMissing, ""
		case memberBad:
			return netip.Addr{}, issueTrustedHeaderUnusable, m
		}
		if n < t.hops {
			continue
		}
		if a, ok := parseMember(m, t.format); ok {
			return a, "", ""
		}
		return netip.Addr{}, issueTrustedHeaderUnusable, m
	}
}

// walk is the right-to-left walk of WithTrustedProxies; socket is the
// (trusted) peer.
func (t *trustConfig) walk(lines []string, socket clientAddr) clientAddr {
	last := socket
	it := newListIter(lines, false, maxTrustedHops)
	for n := 0; n < maxTrustedHops; n++ {
		m, st := it.member()
		switch st {
		case memberEnd:
			if n == 0 {
				last.issue = issueTrustedHeaderMissing
			}
			return last // an entirely trusted chain: its leftmost address
		case memberBad:
			last.issue, last.detail = issueTrustedHeaderUnusable, m
			return last
		}
		a, ok := parseMember(m, formatXFF)
		if !ok {
			last.issue, last.detail = issueTrustedHeaderUnusable, m
			return last
		}
		if !t.trusted(a) {
			return clientAddr{addr: a, src: KeySourceHeader}
		}
		last = clientAddr{addr: a, src: KeySourceHeader}
	}
	last.issue, last.detail = issueTrustedHeaderUnusable, "more than 16 trusted hops"
	return last
}

// parseMember parses one list member: an X-Forwarded-For address, or the for=
// node of a Forwarded element.
func parseMember(m string, f headerFormat) (netip.Addr, bool) {
	if f == formatForwarded {
		v, ok := forwardedFor(m)
		if !ok {
			return netip.Addr{}, false
		}
		return parseForwardedNode(v)
	}
	return parseAddrText(m, false)
}
