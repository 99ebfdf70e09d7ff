package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP derives the client's address of a request. The socket peer
// (Request.RemoteAddr) is the client unless it is one of the Trusted
// proxies; only then is the proxy chain header read, from the right (the
// hop nearest to us) leftwards, skipping trusted hops: the first untrusted
// hop is the client. When every hop is trusted, the leftmost one is. A
// spoofed chain from an untrusted peer is therefore never read, and hops
// that a client prepended before reaching the first trusted proxy are
// never reached.
//
// A trusted proxy that reports a hop that is not an address ("unknown", an
// obfuscated "_node", garbage) gives ErrNoKey naming it, rather than a key
// shared by every such client.
type ClientIP struct {
	// Trusted lists the proxies whose chain headers are believed.
	// See ParsePrefixes.
	Trusted []netip.Prefix
	// Header is the chain header the trusted proxies write:
	// HeaderXForwardedFor (the default when empty) or HeaderForwarded
	// (RFC 7239, for= parameters). Only the one named is read: a header the
	// proxies do not write may come straight from the client.
	Header string
	// IPv6Bits, when between 1 and 127, makes Key group IPv6 clients by
	// that prefix ("2001:db8:1:2::/64" for 64): one host usually holds a
	// whole /64, so keying by full address lets it rotate freely. IPv4
	// clients are keyed by address. Addr is not affected.
	IPv6Bits int
}

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", a /32 or /128), for ClientIP.Trusted.
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s))
	for _, v := range s {
		v = strings.TrimSpace(v)
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", v, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", v, err)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Key is a KeyFunc: the client's address as text, or its IPv6 prefix
// with IPv6Bits.
func (c ClientIP) Key(r *http.Request) (string, error) {
	a, err := c.Addr(r)
	if err != nil {
		return "", err
	}
	if a.Is6() && c.IPv6Bits > 0 && c.IPv6Bits < 128 {
		p, err := a.Prefix(c.IPv6Bits)
		if err == nil {
			return p.String(), nil
		}
	}
	return a.String(), nil
}

// Addr returns the client's address of r (IPv4-mapped IPv6 addresses
// unmapped, zones dropped).
func (c ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, err := parseRemoteAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q: %v", ErrNoKey, r.RemoteAddr, err)
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	name := HeaderXForwardedFor
	if c.Header != "" {
		name = http.CanonicalHeaderKey(c.Header)
	}
	lines := r.Header.Values(name)
	var hops []string
	switch name {
	case HeaderXForwardedFor:
		hops = parseXForwardedFor(lines)
	case HeaderForwarded:
		for _, l := range lines {
			fs, err := ParseForwarded(l)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("%w: %s from trusted proxy %v: %v", ErrNoKey, name, peer, err)
			}
			hops = append(hops, fs...)
		}
	default:
		return netip.Addr{}, fmt.Errorf("%w: ClientIP.Header %q is neither %s nor %s", ErrNoKey, c.Header, HeaderXForwardedFor, HeaderForwarded)
	}
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := ParseNode(hops[i])
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%w: %s hop %q reported by trusted %v: %v", ErrNoKey, name, hops[i], addr, err)
		}
		addr = a
		if !c.trusted(a) {
			return a, nil
		}
	}
	return addr, nil
}

func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func parseRemoteAddr(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, errors.New("not an address")
	}
	return a.Unmap().WithZone(""), nil
}

// parseXForwardedFor returns the hops of X-Forwarded-For field lines, left
// to right; empty list elements are skipped.
func parseXForwardedFor(lines []string) []string {
	var hops []string
	for _, l := range lines {
		for h := range strings.SplitSeq(l, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	return hops
}

// ParseNode parses one proxy chain hop: an X-Forwarded-For entry or the
// unquoted value of a Forwarded for= parameter. It accepts an IPv4
// address, an IPv6 address (bare, or in brackets), each with an optional
// :port (numeric, or obfuscated "_x" in brackets or after IPv4). It rejects
// "unknown" and obfuscated identifiers ("_hidden"), which name no address.
func ParseNode(s string) (netip.Addr, error) {
	switch {
	case s == "":
		return netip.Addr{}, errors.New("empty node")
	case strings.EqualFold(s, "unknown"):
		return netip.Addr{}, errors.New(`node is "unknown"`)
	case s[0] == '_':
		return netip.Addr{}, fmt.Errorf("node %q is obfuscated", s)
	}
	var host, port string
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, fmt.Errorf("node %q has no closing ']'", s)
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return netip.Addr{}, fmt.Errorf("node %q has %q after ']'", s, port)
			}
			port = port[1:]
			if port == "" {
				return netip.Addr{}, fmt.Errorf("node %q has an empty port", s)
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return netip.Addr{}, fmt.Errorf("node %q: %q in brackets is not an IPv6 address", s, host)
		}
		if err := checkPort(port); err != nil {
			return netip.Addr{}, fmt.Errorf("node %q: %v", s, err)
		}
		return a.Unmap().WithZone(""), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), nil
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.IndexByte(s[i+1:], ':') >= 0 {
		return netip.Addr{}, fmt.Errorf("node %q is not an address", s)
	}
	host, port = s[:i], s[i+1:]
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("node %q is not an address", s)
	}
	if port == "" {
		return netip.Addr{}, fmt.Errorf("node %q has an empty port", s)
	}
	if err := checkPort(port); err != nil {
		return netip.Addr{}, fmt.Errorf("node %q: %v", s, err)
	}
	return a, nil
}

// checkPort accepts "", a decimal port up to 65535, or an RFC 7239
// obfuscated port "_" followed by ALPHA / DIGIT / "." / "_" / "-".
func checkPort(p string) error {
	if p == "" {
		return nil
	}
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return fmt.Errorf("obfuscated port %q has byte %q", p, c)
			}
		}
		return nil
	}
	if len(p) > 5 {
		return fmt.Errorf("port %q is not a port", p)
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return fmt.Errorf("port %q is not a port", p)
		}
		n = n*10 + int(p[i]-'0')
	}
	if n > 65535 {
		return fmt.Errorf("port %q is out of range", p)
	}
	return nil
}

// ParseForwarded parses one RFC 7239 Forwarded field value and returns the
// for= value of each forwarded-element, left to right, unquoted. An element
// without for= gives "" (a hop that ParseNode rejects), so that the chain
// keeps its positions. Parameter names are case-insensitive; values are
// tokens or quoted strings; a malformed value is an error naming the
// offending byte.
func ParseForwarded(s string) ([]string, error) {
	var fors []string
	i, n := 0, len(s)
	for {
		forVal, hasFor, pairs := "", false, 0
		for {
			i = skipOWS(s, i)
			if i >= n || s[i] == ',' {
				break
			}
			if s[i] == ';' {
				i++
				continue
			}
			j := i
			for j < n && isTchar(s[j]) {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("unexpected %q at offset %d", s[i], i)
			}
			name := s[i:j]
			if j >= n || s[j] != '=' {
				return nil, fmt.Errorf("parameter %q at offset %d has no '='", name, i)
			}
			j++
			var val string
			if j < n && s[j] == '"' {
				v, k, err := parseQuoted(s, j)
				if err != nil {
					return nil, err
				}
				val, j = v, k
			} else {
				k := j
				for k < n && isTchar(s[k]) {
					k++
				}
				if k == j {
					return nil, fmt.Errorf("parameter %q at offset %d has an empty value", name, i)
				}
				val, j = s[j:k], k
			}
			pairs++
			if strings.EqualFold(name, "for") {
				if hasFor {
					return nil, fmt.Errorf("element has two for= parameters (offset %d)", i)
				}
				forVal, hasFor = val, true
			}
			i = skipOWS(s, j)
			if i < n && s[i] != ';' && s[i] != ',' {
				return nil, fmt.Errorf("unexpected %q at offset %d", s[i], i)
			}
		}
		if pairs > 0 {
			fors = append(fors, forVal)
		}
		if i >= n {
			return fors, nil
		}
		i++ // ','
	}
}

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// parseQuoted parses the quoted-string starting at s[i] == '"' and returns
// its unescaped content and the offset after the closing quote.
func parseQuoted(s string, i int) (string, int, error) {
	var b strings.Builder
	start := i
	for i++; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), i + 1, nil
		case c == '\\':
			i++
			if i >= len(s) {
				return "", 0, fmt.Errorf("quoted string at offset %d ends in '\\'", start)
			}
			if !isQuotedPair(s[i]) {
				return "", 0, fmt.Errorf("quoted string at offset %d escapes byte %#x", start, s[i])
			}
			b.WriteByte(s[i])
		case c == '\t' || c == ' ' || c == 0x21 || c >= 0x23 && c <= 0x5b || c >= 0x5d && c <= 0x7e || c >= 0x80:
			b.WriteByte(c)
		default:
			return "", 0, fmt.Errorf("quoted string at offset %d has byte %#x", start, c)
		}
	}
	return "", 0, fmt.Errorf("quoted string at offset %d is not closed", start)
}

func isQuotedPair(c byte) bool { return c == '\t' || c == ' ' || c >= 0x21 && c != 0x7f }

// isTchar reports an RFC 9110 token character.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
