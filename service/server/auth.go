package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
)

// Auth configures GET /v1/auth, the endpoint for nginx auth_request and
// Traefik ForwardAuth: each Source becomes one descriptor, {Key: value},
// of a request in Domain.
type Auth struct {
	Domain  string
	Sources []Source
	// DenyStatus is the status of a denial: 429 when 0. nginx's
	// auth_request turns every status but 2xx, 401 and 403 into 500, so
	// nginx set-ups use 403 and map it back with error_page.
	DenyStatus int
	// Identity says how the value of an address source is established.
	Identity Identity
}

// Identity establishes the client address of an auth request for the
// address sources (Source.Address).
//
// The socket peer is the client unless it is in Trusted. A trusted peer is
// a proxy: the client is then read from the source's headers, each walked
// from the right past trusted hops (X-Forwarded-For and Forwarded as
// chains of every line, any other header as one address per line). When
// several of the headers name an untrusted client they must agree: a proxy
// forwards the headers of its client, so a header that the proxy does not
// write may be the client's invention.
//
// When no address can be established (a trusted peer that sends none of
// the headers, a hop that is not an address, headers that disagree), the
// request is denied, or, with NoIdentityKey, valued NoIdentityKey: never
// admitted unlimited.
type Identity struct {
	// Trusted lists the proxies whose forwarding headers are read; nil
	// trusts none, so that every request is keyed by its socket peer.
	Trusted []netip.Prefix
	// IPv6Bits groups IPv6 clients by this prefix length
	// ("2001:db8:1:2::/64" for 64); 0 or 128 keys them by address.
	IPv6Bits int
	// NoIdentityKey, when not empty, is the value of an address source
	// whose address cannot be established: all such requests share it.
	// Empty denies them.
	NoIdentityKey string
}

// DefaultTrustedProxies is the default of --trusted-proxies: loopback,
// where a proxy on the same host (nginx auth_request, a sidecar) connects
// from.
var DefaultTrustedProxies = []string{"127.0.0.0/8", "::1"}

// DefaultIPv6Bits is the default of --auth-ipv6-prefix: a /64 is what one
// subscriber or host is usually given, and keying by full address would
// let it rotate through 2^64 addresses.
const DefaultIPv6Bits = 64

// MaxNoIdentityKey bounds the length of Identity.NoIdentityKey.
const MaxNoIdentityKey = 64

// Source is one descriptor of an auth request: Key, valued by the first of
// Headers present, or, for an address source, by the client's address.
type Source struct {
	Key     string
	Headers []string
	// Address makes the value the client's address, established by
	// Identity from the socket peer and, behind a trusted proxy, from
	// Headers; it is never a header's raw text. ParseAuthSources sets it
	// for the key remote_address and for any source that names
	// X-Forwarded-For, Forwarded or X-Real-Ip.
	Address bool
}

// DefaultAuth matches the built-in example configuration: domain
// "example"; remote_address, the client's address, behind a loopback proxy
// from X-Forwarded-For or X-Real-Ip; path from X-Original-URI (nginx) or
// X-Forwarded-Uri (Traefik) without its query; api_key from X-Api-Key.
func DefaultAuth() Auth {
	trusted, _ := clientip.ParsePrefixes(DefaultTrustedProxies...)
	return Auth{Domain: "example", Sources: []Source{
		{Key: "remote_address", Headers: []string{"X-Forwarded-For", "X-Real-Ip"}, Address: true},
		{Key: "path", Headers: []string{"X-Original-Uri", "X-Forwarded-Uri"}},
		{Key: "api_key", Headers: []string{"X-Api-Key"}},
	}, Identity: Identity{Trusted: trusted, IPv6Bits: DefaultIPv6Bits}}
}

// addressKey is the descriptor key whose source is always an address.
const addressKey = "remote_address"

// ParseAuthSources parses "key=Header1|Header2,key2=Header3", as the
// --auth-descriptors flag gives it. A source keyed remote_address or naming
// a forwarding header (X-Forwarded-For, Forwarded, X-Real-Ip) is an
// address source.
func ParseAuthSources(s string) ([]Source, error) {
	var out []Source
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, hs, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" || strings.TrimSpace(hs) == "" {
			return nil, fmt.Errorf("auth descriptor %q: want key=Header or key=Header1|Header2", part)
		}
		src := Source{Key: strings.TrimSpace(k)}
		src.Address = src.Key == addressKey
		for _, h := range strings.Split(hs, "|") {
			if h = strings.TrimSpace(h); h != "" {
				h = http.CanonicalHeaderKey(h)
				switch h {
				case clientip.XForwardedFor, clientip.Forwarded, clientip.XRealIP:
					src.Address = true
				}
				src.Headers = append(src.Headers, h)
			}
		}
		out = append(out, src)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("auth descriptors %q: none given", s)
	}
	return out, nil
}

// ParseNoIdentity parses --auth-no-identity: "deny" gives "", "key:NAME"
// gives NAME, 1 to MaxNoIdentityKey letters, digits, '.', '_' or '-' and not
// an address (which could be a real client's key).
func ParseNoIdentity(s string) (string, error) {
	if s == "deny" {
		return "", nil
	}
	name, ok := strings.CutPrefix(s, "key:")
	if !ok {
		return "", fmt.Errorf("%q: want deny or key:NAME", s)
	}
	if name == "" || len(name) > MaxNoIdentityKey {
		return "", fmt.Errorf("%q: NAME must have 1 to %d characters", s, MaxNoIdentityKey)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", fmt.Errorf("%q: NAME has %q; want letters, digits, '.', '_' and '-'", s, c)
		}
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return "", fmt.Errorf("%q: NAME is an address, which a client could have", s)
	}
	return name, nil
}

// value returns the descriptor value of a header source in h, "" when
// absent.
func (src Source) value(h http.Header) string {
	for _, name := range src.Headers {
		v := strings.TrimSpace(h.Get(name))
		switch http.CanonicalHeaderKey(name) {
		case "X-Original-Uri", "X-Forwarded-Uri":
			v, _, _ = strings.Cut(v, "?")
		}
		if v != "" {
			return v
		}
	}
	return ""
}

// errNoIdentity reports an auth request whose client address cannot be
// established.
var errNoIdentity = errors.New("no client identity")

// client returns the key of r's client address for the address source
// src, or an error wrapping errNoIdentity. untrustedHeader names a
// forwarding header that an untrusted peer sent (and that was ignored).
func (id Identity) client(r *http.Request, src Source) (key, untrustedHeader string, err error) {
	peer, err := clientip.Peer(r.RemoteAddr)
	if err != nil {
		return "", "", fmt.Errorf("%w: socket peer %q: %v", errNoIdentity, r.RemoteAddr, err)
	}
	if !clientip.Contains(id.Trusted, peer) {
		for _, name := range src.Headers {
			if len(r.Header.Values(name)) > 0 {
				untrustedHeader = name
				break
			}
		}
		return clientip.Key(peer, id.IPv6Bits), untrustedHeader, nil
	}
	var best clientip.Result
	var from string
	for _, name := range src.Headers {
		lines := r.Header.Values(name)
		if len(lines) == 0 {
			continue
		}
		res, err := clientip.Walk(peer, name, lines, id.Trusted)
		if err != nil {
			return "", "", fmt.Errorf("%w: %v", errNoIdentity, err)
		}
		switch {
		case res.Hops == 0: // only empty list elements
		case from == "", res.Untrusted && !best.Untrusted:
			best, from = res, name
		case res.Untrusted && res.Addr != best.Addr:
			return "", "", fmt.Errorf("%w: %s names client %v but %s names %v (list in --auth-descriptors only the headers your proxy sets)",
				errNoIdentity, from, best.Addr, name, res.Addr)
		}
	}
	if from == "" {
		return "", "", fmt.Errorf("%w: trusted proxy %v sent none of %s", errNoIdentity, peer, strings.Join(src.Headers, ", "))
	}
	return clientip.Key(best.Addr, id.IPv6Bits), "", nil
}

// identityLogEvery spaces the warnings about identity, which a client can
// provoke on every request.
const identityLogEvery = time.Minute

// warnIdentity logs msg at most once per identityLogEvery.
func (s *Server) warnIdentity(msg string, args ...any) {
	warnEvery(&s.authLogged, s.log, msg, args...)
}

// warnEvery logs msg at most once per identityLogEvery, last holding the
// time of the last (unix nanoseconds): for what a caller can provoke on
// every request.
func warnEvery(last *atomic.Int64, log *slog.Logger, msg string, args ...any) {
	now := time.Now().UnixNano()
	prev := last.Load()
	if prev != 0 && now-prev < int64(identityLogEvery) || !last.CompareAndSwap(prev, now) {
		return
	}
	log.Warn(msg, args...)
}

// handleAuth answers 200 when the request described by the configured
// headers is admitted, the deny status with Retry-After when it is not;
// both carry the RateLimit-* headers of the descriptor closest to its
// limit. A request whose client address cannot be established is denied
// (without Retry-After) unless Identity.NoIdentityKey is set.
func (s *Server) handleAuth(w http.ResponseWriter, r *http.Request) {
	denyStatus := s.auth.DenyStatus
	if denyStatus == 0 {
		denyStatus = http.StatusTooManyRequests
	}
	// One entry per source, each its own descriptor: the entries share one
	// array.
	entries := make([]engine.Entry, 0, len(s.auth.Sources))
	req := engine.Request{Domain: s.auth.Domain, Descriptors: make([]engine.Descriptor, 0, len(s.auth.Sources))}
	for _, src := range s.auth.Sources {
		var v string
		if src.Address {
			key, ignored, err := s.auth.Identity.client(r, src)
			switch {
			case err != nil && s.auth.Identity.NoIdentityKey == "":
				s.warnIdentity("auth: request denied", "err", err, "peer", r.RemoteAddr)
				writeProblem(w, denyStatus, src.Key, err.Error())
				return
			case err != nil:
				s.warnIdentity("auth: request given the shared no-identity key", "err", err, "peer", r.RemoteAddr, "key", s.auth.Identity.NoIdentityKey)
				key = s.auth.Identity.NoIdentityKey
			case ignored != "":
				s.warnIdentity("auth: "+ignored+" ignored: the socket peer is not in --trusted-proxies, so it is the client", "peer", r.RemoteAddr)
			}
			v = key
		} else {
			v = src.value(r.Header)
		}
		if v != "" {
			entries = append(entries, engine.Entry{Key: src.Key, Value: v})
			req.Descriptors = append(req.Descriptors, engine.Descriptor{Entries: entries[len(entries)-1:]})
		}
	}
	if len(req.Descriptors) == 0 {
		w.WriteHeader(http.StatusOK) // nothing to limit on
		return
	}
	res, err := s.eng.Decide(r.Context(), &req)
	if err != nil {
		s.log.Warn("auth: decision failed", "err", err)
		writeProblem(w, errorStatus(err), "", err.Error())
		return
	}
	h := w.Header()
	if i := res.Closest(res.Code == engine.OverLimit); i >= 0 {
		st := &res.Statuses[i]
		reset := engine.CeilSeconds(st.UntilReset)
		h.Set(rls.HeaderLimit, strconv.FormatUint(uint64(engine.LimitOf(st.Rule).RequestsPerUnit), 10))
		h.Set(rls.HeaderRemaining, strconv.FormatUint(uint64(st.Remaining), 10))
		h.Set(rls.HeaderReset, strconv.FormatInt(reset, 10))
		if res.Code == engine.OverLimit {
			h.Set("Retry-After", strconv.FormatInt(max(reset, 1), 10))
		}
	}
	if res.Code == engine.OverLimit {
		writeProblem(w, denyStatus, "", "rate limit exceeded")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// errorStatus is the HTTP status of an engine error: 400 for a request
// that cannot be decided as sent, 504 when the request's context ended, 503
// when the store made no decision.
func errorStatus(err error) int {
	var re *engine.RequestError
	if errors.As(err, &re) {
		return http.StatusBadRequest
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable
}
