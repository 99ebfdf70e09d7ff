package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/sluicehq/sluice/internal/clientip"
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
	// Trusted lists the proxies whose chain headers are believed. Build it
	// from configuration text with ParsePrefixes.
	Trusted []netip.Prefix
	// Header is the chain header the trusted proxies write:
	// HeaderXForwardedFor (the default when empty), HeaderForwarded
	// (RFC 7239, for= parameters) or HeaderXRealIP. Every line of it is
	// read, and at most 32 trusted hops are walked. Only the one named is
	// read: a header the proxies do not write may come straight from the
	// client.
	Header string
	// IPv6Bits, when between 1 and 127, makes Key group IPv6 clients by
	// that prefix ("2001:db8:1:2::/64" for 64): one host usually holds a
	// whole /64, so keying by full address lets it rotate freely. IPv4
	// clients are keyed by address. Addr is not affected.
	IPv6Bits int
}

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", a /32 or /128), for ClientIP.Trusted.
// Prefixes are masked and IPv4-mapped ones unmapped, as ClientIP compares
// addresses: "::ffff:10.0.0.0/104" trusts 10.0.0.0/8, which a prefix from
// netip.ParsePrefix would not. A malformed entry is an error naming it.
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	p, err := clientip.ParsePrefixes(s...)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return p, nil
}

// Key is a KeyFunc: the client's address as text, or its IPv6 prefix
// with IPv6Bits.
func (c ClientIP) Key(r *http.Request) (string, error) {
	a, err := c.Addr(r)
	if err != nil {
		return "", err
	}
	return clientip.Key(a, c.IPv6Bits), nil
}

// Addr returns the client's address of r (IPv4-mapped IPv6 addresses
// unmapped, zones dropped).
func (c ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, err := clientip.Peer(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q: %v", ErrNoKey, r.RemoteAddr, err)
	}
	if !clientip.Contains(c.Trusted, peer) {
		return peer, nil
	}
	name := HeaderXForwardedFor
	if c.Header != "" {
		name = http.CanonicalHeaderKey(c.Header)
	}
	switch name {
	case HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP:
	default:
		return netip.Addr{}, fmt.Errorf("%w: ClientIP.Header %q is none of %s, %s and %s", ErrNoKey, c.Header, HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP)
	}
	res, err := clientip.Walk(peer, name, r.Header.Values(name), c.Trusted)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	return res.Addr, nil
}
