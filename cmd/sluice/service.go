package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/rls"
)

// serviceFlags say how the rate-limit service answers: its response
// headers, and the shadow and quota modes.
type serviceFlags struct {
	responseHeaders bool
	headerNames     [3]string // limit, remaining, reset
	shadowMode      bool
	quotaMode       bool
}

func (g *serviceFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&g.responseHeaders, "response-headers", false, "add RateLimit-Limit, -Remaining and -Reset to ShouldRateLimit's response_headers_to_add")
	fs.StringVar(&g.headerNames[0], "limit-header", rls.HeaderLimit, "`name` of --response-headers' limit header (the reference's LIMIT_LIMIT_HEADER)")
	fs.StringVar(&g.headerNames[1], "remaining-header", rls.HeaderRemaining, "`name` of --response-headers' remaining header (the reference's LIMIT_REMAINING_HEADER)")
	fs.StringVar(&g.headerNames[2], "reset-header", rls.HeaderReset, "`name` of --response-headers' reset header (the reference's LIMIT_RESET_HEADER)")
	fs.BoolVar(&g.shadowMode, "shadow-mode", false, "answer every ShouldRateLimit OK, as the reference's SHADOW_MODE: statuses and metrics still tell which limits are over (for trying limits on live traffic)")
	fs.BoolVar(&g.quotaMode, "quota-mode", false, "put every limit in quota_mode, as the reference's QUOTA_MODE: over its limit, a descriptor is reported but does not deny")
}

func (g *serviceFlags) validate() error {
	for i, flag := range []string{"--limit-header", "--remaining-header", "--reset-header"} {
		if !headerName(g.headerNames[i]) {
			return fmt.Errorf("%s %q: want an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", flag, g.headerNames[i])
		}
	}
	return nil
}

// options are the service's options of these flags.
func (g *serviceFlags) options() []rls.Option {
	return []rls.Option{
		rls.WithResponseHeaders(g.responseHeaders),
		rls.WithHeaderNames(g.headerNames[0], g.headerNames[1], g.headerNames[2]),
		rls.WithShadowMode(g.shadowMode), rls.WithQuotaMode(g.quotaMode),
	}
}

// headerName reports whether s is an HTTP header field name (RFC 9110's
// token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
