package limit

import (
	"net/netip"
	"strings"
)

// Parsing of address text: the socket peer an adapter passes in
// Request.Peer, and the members of forwarding headers (forwarded.go). Valid
// input never allocates.

// maxAddrText bounds the text of one address with brackets, zone and port.
const maxAddrText = 100

// parsePeer parses a socket peer: "ip", "ip:port", "[ipv6]", "[ipv6]:port",
// each IPv6 form with an optional zone. It drops the port and the zone and
// unmaps IPv4-mapped IPv6 (::ffff:192.0.2.1 is 192.0.2.1). The unspecified
// addresses 0.0.0.0 and :: are not client addresses: ok is false for them and
// for anything unparseable (a host name, a port outside 0..65535, a zone on
// IPv4, brackets around IPv4, more than 100 bytes).
func parsePeer(s string) (netip.Addr, bool) {
	return parseAddrText(s, false)
}

// canonicalIPv4 is the fast path for the most common peer, "a.b.c.d:port"
// in canonical form (no leading zeros): it returns "a.b.c.d", which is
// exactly what parsePeer + AppendTo would produce, without parsing into a
// netip.Addr. Anything else (IPv6, zones, odd forms, 0.0.0.0) returns false
// and takes the general path, as does anything over maxAddrText bytes,
// which parsePeer refuses.
func canonicalIPv4(s string) (string, bool) {
	if len(s) > maxAddrText {
		return "", false
	}
	i, zero := 0, true
	for octet := 0; octet < 4; octet++ {
		if octet > 0 {
			if i >= len(s) || s[i] != '.' {
				return "", false
			}
			i++
		}
		if i >= len(s) {
			return "", false
		}
		c := s[i] - '0'
		if c > 9 {
			return "", false
		}
		i++
		if c == 0 {
			if i < len(s) && s[i]-'0' <= 9 {
				return "", false // a leading zero
			}
			continue
		}
		v := uint(c)
		for k := 0; k < 2 && i < len(s); k++ {
			d := s[i] - '0'
			if d > 9 {
				break
			}
			v = v*10 + uint(d)
			i++
		}
		if v > 255 {
			return "", false
		}
		zero = false
	}
	if zero {
		return "", false
	}
	host := s[:i]
	if i == len(s) {
		return host, true
	}
	if s[i] != ':' || i+1 == len(s) {
		return "", false
	}
	port := uint(0)
	for j := i + 1; j < len(s); j++ {
		d := s[j] - '0'
		if d > 9 {
			return "", false
		}
		if port = port*10 + uint(d); port > 65535 {
			return "", false
		}
	}
	return host, true
}

// parseAddrText parses "ip", "ip:port", "[ipv6]", "[ipv6]:port", each IPv6
// form with an optional zone. The zone is cut off as text (so that attacker
// zones are never interned), the port is checked and dropped, IPv4-mapped IPv6
// is unmapped. With obfPort, an RFC 7239 obfuscated port ("_abc") is accepted
// as well as a numeric one. The unspecified addresses are rejected. It does
// not allocate for valid input.
func parseAddrText(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" || len(s) > maxAddrText {
		return netip.Addr{}, false
	}
	host := s
	if s[0] == '[' {
		j := strings.IndexByte(s, ']')
		if j < 0 {
			return netip.Addr{}, false
		}
		host = s[1:j]
		if rest := s[j+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfPort)) {
			return netip.Addr{}, false
		}
		if strings.IndexByte(host, ':') < 0 {
			return netip.Addr{}, false // brackets hold IPv6 only
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 with a port. Two or more: bare IPv6, no port.
		host = s[:i]
		if !validPort(s[i+1:], obfPort) {
			return netip.Addr{}, false
		}
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == len(host)-1 || strings.IndexByte(host[:i], ':') < 0 {
			return netip.Addr{}, false // an empty zone, or a zone on IPv4
		}
		host = host[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether p is a decimal port 0..65535 (leading zeros
// allowed, as net/netip does) or, with obf, an RFC 7239 obfport: "_" followed
// by ALPHA / DIGIT / "." / "_" / "-".
func validPort(p string, obf bool) bool {
	if p == "" {
		return false
	}
	if obf && p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		if n = n*10 + int(c-'0'); n > 65535 {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
