// Package clientip derives the client address of an HTTP request from its
// socket peer and, when that peer is a trusted proxy, from the proxy chain
// header the proxies write. It is the one implementation behind
// httplimit.ClientIP and sluice serve's GET /v1/auth, and it imports only
// the standard library.
//
// The chain is walked from the right (the hop nearest to us) leftwards,
// past trusted hops: the first untrusted hop is the client. Hops that a
// client prepended before its request reached the first trusted proxy are
// therefore never reached, and a chain header from an untrusted peer is
// never read.
package clientip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Chain header names, in canonical form.
const (
	XForwardedFor = "X-Forwarded-For"
	Forwarded     = "Forwarded"
	XRealIP       = "X-Real-Ip"
)

// MaxHops bounds the hops of one chain walked past trusted proxies: a
// chain with more trusted hops than this is an error (ErrChainTooLong). Real deployments have
// a handful; the bound keeps the work per request independent of what a
// request sends (the HTTP server's header size limit bounds the rest).
const MaxHops = 32

// MaxElements bounds the list elements (empty ones included) and field
// lines looked at before the client is found, and MaxForwardedLine the
// length of a Forwarded line parsed. Both keep the work of a walk small
// whatever the size of the headers; a client that pads its own headers
// beyond them only loses its identity.
const (
	MaxElements      = 256
	MaxForwardedLine = 16 << 10
)

// ErrChainTooLong reports a chain with more than MaxHops trusted hops, or
// more than MaxElements elements before the client, or a Forwarded line
// longer than MaxForwardedLine.
var ErrChainTooLong = errors.New("proxy chain too long")

var (
	errTooManyHops     = fmt.Errorf("%w: more than %d trusted hops", ErrChainTooLong, MaxHops)
	errTooManyElements = fmt.Errorf("%w: more than %d list elements and lines before the client", ErrChainTooLong, MaxElements)
	errLineTooLong     = fmt.Errorf("%w: Forwarded line longer than %d bytes", ErrChainTooLong, MaxForwardedLine)
)

// Result is the outcome of a walk.
type Result struct {
	// Addr is the client: the first untrusted hop from the right, or, when
	// every hop is trusted, the leftmost one (the peer when there is none).
	Addr netip.Addr
	// Untrusted reports that Addr is an untrusted hop, that is, that the
	// chain named a client outside the trusted proxies.
	Untrusted bool
	// Hops is the number of hops read.
	Hops int
}

// HopError reports a hop of the chain that is not an address, or, with
// Line, a chain that could not be read (a malformed Forwarded line, too
// many hops). By is the trusted address that reported it.
type HopError struct {
	Header string
	Hop    string
	Line   bool
	By     netip.Addr
	Err    error
}

func (e *HopError) Error() string {
	if e.Line {
		return fmt.Sprintf("%s from trusted proxy %v: %v", e.Header, e.By, e.Err)
	}
	return fmt.Sprintf("%s hop %q reported by trusted %v: %v", e.Header, e.Hop, e.By, e.Err)
}

func (e *HopError) Unwrap() error { return e.Err }

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", a /32 or /128). Prefixes are masked and
// IPv4-mapped addresses unmapped, so that "::ffff:10.0.0.1" trusts the IPv4
// address 10.0.0.1.
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s))
	for _, v := range s {
		v = strings.TrimSpace(v)
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", v, err)
			}
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", v, err)
		}
		a = Canonical(a)
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Contains reports whether a is in one of ps.
func Contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Canonical returns a with an IPv4-mapped IPv6 address unmapped and its
// zone dropped: the form every address of this package is returned in.
func Canonical(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// Peer parses a socket peer as http.Request.RemoteAddr holds it
// ("192.0.2.1:1234", "[2001:db8::1]:443", or an address without a port).
func Peer(remoteAddr string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return Canonical(ap.Addr()), nil
	}
	a, err := netip.ParseAddr(remoteAddr)
	if err != nil {
		return netip.Addr{}, errors.New("not an address")
	}
	return Canonical(a), nil
}

// Key is the text form of a as a rate-limit key: IPv4 addresses by
// address, IPv6 addresses by their prefix of ipv6Bits bits
// ("2001:db8:1:2::/64"), or by address when ipv6Bits is not within 1..127.
func Key(a netip.Addr, ipv6Bits int) string {
	a = Canonical(a)
	if a.Is6() && ipv6Bits > 0 && ipv6Bits < 128 {
		if p, err := a.Prefix(ipv6Bits); err == nil {
			return p.String()
		}
	}
	return a.String()
}

// Walk returns the client named by the header name whose field lines, in
// order, a trusted peer sent. Every line is part of the chain:
// X-Forwarded-For lines are one comma-separated list, Forwarded lines one
// list of elements, and each line of any other header (X-Real-Ip,
// CF-Connecting-IP) is one hop. At most MaxHops hops, MaxElements elements
// and lines, and Forwarded lines of MaxForwardedLine bytes are read; lines
// left of the client are not parsed.
func Walk(peer netip.Addr, name string, lines []string, trusted []netip.Prefix) (Result, error) {
	res := Result{Addr: Canonical(peer)}
	scanned := 0
	// scan counts an element or a line; it reports the error past the bound.
	scan := func() error {
		if scanned++; scanned > MaxElements {
			return &HopError{Header: name, Line: true, By: res.Addr, Err: errTooManyElements}
		}
		return nil
	}
	// step takes the next hop to the left; it reports whether to stop.
	step := func(hop string) (bool, error) {
		if res.Hops == MaxHops {
			return true, &HopError{Header: name, Line: true, By: res.Addr, Err: errTooManyHops}
		}
		res.Hops++
		a, err := ParseNode(hop)
		if err != nil {
			return true, &HopError{Header: name, Hop: hop, By: res.Addr, Err: err}
		}
		res.Addr = a
		if !Contains(trusted, a) {
			res.Untrusted = true
			return true, nil
		}
		return false, nil
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if err := scan(); err != nil {
			return res, err
		}
		switch name {
		case XForwardedFor:
			l := lines[i]
			for l != "" {
				if err := scan(); err != nil {
					return res, err
				}
				hop := l
				if j := strings.LastIndexByte(l, ','); j >= 0 {
					hop, l = l[j+1:], l[:j]
				} else {
					l = ""
				}
				if hop = strings.TrimSpace(hop); hop == "" {
					continue
				}
				if stop, err := step(hop); stop {
					return res, err
				}
			}
		case Forwarded:
			if len(lines[i]) > MaxForwardedLine {
				return res, &HopError{Header: name, Line: true, By: res.Addr, Err: errLineTooLong}
			}
			fors, err := parseForwarded(lines[i], MaxHops+1)
			if err != nil {
				return res, &HopError{Header: name, Line: true, By: res.Addr, Err: err}
			}
			for j := len(fors) - 1; j >= 0; j-- {
				if stop, err := step(fors[j]); stop {
					return res, err
				}
			}
		default: // X-Real-Ip and other single-address headers
			if stop, err := step(strings.TrimSpace(lines[i])); stop {
				return res, err
			}
		}
	}
	return res, nil
}

// ParseNode parses one proxy chain hop: an X-Forwarded-For entry, an
// X-Real-Ip value or the unquoted value of a Forwarded for= parameter. It
// accepts an IPv4 address, an IPv6 address (bare, or in brackets), each
// with an optional :port (numeric, or obfuscated "_x" in brackets or after
// IPv4). It rejects "unknown" and obfuscated identifiers ("_hidden"), which
// name no address. The address is returned in Canonical form.
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
		return Canonical(a), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return Canonical(a), nil
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
func ParseForwarded(s string) ([]string, error) { return parseForwarded(s, 0) }

// parseForwarded is ParseForwarded keeping only the last keep values when
// keep > 0, so that its memory does not grow with the line.
func parseForwarded(s string, keep int) ([]string, error) {
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
			if keep > 0 && len(fors) == 2*keep {
				fors = fors[:copy(fors, fors[keep:])]
			}
			fors = append(fors, forVal)
		}
		if i >= n {
			if keep > 0 && len(fors) > keep {
				fors = fors[len(fors)-keep:]
			}
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
// its unescaped content and the offset after the closing quote. Content
// without escapes is a substring of s, not a copy.
func parseQuoted(s string, i int) (string, int, error) {
	var b strings.Builder
	start, escaped := i, false
	for i++; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			if !escaped {
				return s[start+1 : i], i + 1, nil
			}
			return b.String(), i + 1, nil
		case c == '\\':
			if !escaped {
				b.WriteString(s[start+1 : i])
				escaped = true
			}
			i++
			if i >= len(s) {
				return "", 0, fmt.Errorf("quoted string at offset %d ends in '\\'", start)
			}
			if !isQuotedPair(s[i]) {
				return "", 0, fmt.Errorf("quoted string at offset %d escapes byte %#x", start, s[i])
			}
			b.WriteByte(s[i])
		case c == '\t' || c == ' ' || c == 0x21 || c >= 0x23 && c <= 0x5b || c >= 0x5d && c <= 0x7e || c >= 0x80:
			if escaped {
				b.WriteByte(c)
			}
		default:
			return "", 0, fmt.Errorf("quoted string at offset %d has byte %#x", start, c)
		}
	}
	return "", 0, fmt.Errorf("quoted string at offset %d is not closed", start)
}

func isQuotedPair(c byte) bool { return c == '\t' || c == ' ' || c >= 0x21 && c != 0x7f }

// isTchar reports an RFC 9110 token character.
func isTchar(c byte) bool { return tchar[c] }

var tchar = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0
	}
	return t
}()
