package main

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/service/server"
)

// identityFlags are the flags that say how GET /v1/auth establishes the
// client's address.
type identityFlags struct {
	trustedProxies string
	ipv6Prefix     int
	noIdentity     string

	trusted       []netip.Prefix // parsed by validate
	noIdentityKey string
}

func (g *identityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.trustedProxies, "trusted-proxies", strings.Join(server.DefaultTrustedProxies, ","),
		"`CIDRs` (or addresses), comma-separated, of the proxies whose X-Forwarded-For, Forwarded and X-Real-Ip GET /v1/auth reads; any other peer is itself the client; empty trusts none")
	fs.IntVar(&g.ipv6Prefix, "auth-ipv6-prefix", server.DefaultIPv6Bits,
		"GET /v1/auth keys an IPv6 client by its prefix of this many `bits` (1 to 128; 128 keys by address)")
	fs.StringVar(&g.noIdentity, "auth-no-identity", "deny",
		"when GET /v1/auth cannot establish the client's address (a trusted proxy sent none of the headers, or a malformed one), `deny|key:NAME`: deny answers with --auth-deny-status, key:NAME gives all such requests the one remote_address NAME")
}

func (g *identityFlags) validate() error {
	var parts []string
	for p := range strings.SplitSeq(g.trustedProxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	trusted, err := clientip.ParsePrefixes(parts...)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %v", err)
	}
	if g.ipv6Prefix < 1 || g.ipv6Prefix > 128 {
		return fmt.Errorf("--auth-ipv6-prefix %d: want 1 to 128", g.ipv6Prefix)
	}
	key, err := server.ParseNoIdentity(g.noIdentity)
	if err != nil {
		return fmt.Errorf("--auth-no-identity %v", err)
	}
	g.trusted, g.noIdentityKey = trusted, key
	return nil
}

// identity is the server.Identity of validated flags.
func (g *identityFlags) identity() server.Identity {
	return server.Identity{Trusted: g.trusted, IPv6Bits: g.ipv6Prefix, NoIdentityKey: g.noIdentityKey}
}
