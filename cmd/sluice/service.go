package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
)

// serviceFlags say how the rate-limit service answers: its response
// headers, the shadow and quota modes, the counting of the rules that do
// not set their own, and the near-limit threshold of the metrics.
type serviceFlags struct {
	responseHeaders bool
	dynamicMetadata bool
	headerNames     [3]string // limit, remaining, reset
	shadowMode      bool
	quotaMode       bool
	counting        sluice.Counting
	nearLimitRatio  float64
}

func (g *serviceFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&g.responseHeaders, "response-headers", false, "add RateLimit-Limit, -Remaining and -Reset to ShouldRateLimit's response_headers_to_add")
	fs.StringVar(&g.headerNames[0], "limit-header", rls.HeaderLimit, "`name` of --response-headers' limit header (the reference's LIMIT_LIMIT_HEADER)")
	fs.StringVar(&g.headerNames[1], "remaining-header", rls.HeaderRemaining, "`name` of --response-headers' remaining header (the reference's LIMIT_REMAINING_HEADER)")
	fs.StringVar(&g.headerNames[2], "reset-header", rls.HeaderReset, "`name` of --response-headers' reset header (the reference's LIMIT_RESET_HEADER)")
	fs.BoolVar(&g.dynamicMetadata, "response-dynamic-metadata", false, "add dynamic_metadata to ShouldRateLimit's answers: the domain, the descriptors, hits_addend and the quota_mode descriptors over their limit, as the reference's RESPONSE_DYNAMIC_METADATA (Envoy keeps it for access logs and later filters)")
	fs.BoolVar(&g.shadowMode, "shadow-mode", false, "answer every ShouldRateLimit OK, as the reference's SHADOW_MODE: statuses and metrics still tell which limits are over (for trying limits on live traffic)")
	fs.BoolVar(&g.quotaMode, "quota-mode", false, "put every limit in quota_mode, as the reference's QUOTA_MODE: over its limit, a descriptor is reported but does not deny")
	fs.TextVar(&g.counting, "counting", sluice.CountAdmitted, "`mode` of the rules without a counting key: admitted (a denied request counts nothing) or all (every hit, also a denied one, as the reference counts; sliding_log rules still count admitted hits)")
	fs.Float64Var(&g.nearLimitRatio, "near-limit-ratio", engine.DefaultNearLimitRatio, "the fraction of a limit above which its hits count as near the limit in the metrics (the reference's NEAR_LIMIT_RATIO), 0 < r <= 1")
}

func (g *serviceFlags) validate() error {
	for i, flag := range []string{"--limit-header", "--remaining-header", "--reset-header"} {
		if !headerName(g.headerNames[i]) {
			return fmt.Errorf("%s %q: want an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", flag, g.headerNames[i])
		}
	}
	if !(g.nearLimitRatio > 0 && g.nearLimitRatio <= 1) {
		return fmt.Errorf("--near-limit-ratio %v: want a number above 0 and at most 1", g.nearLimitRatio)
	}
	return nil
}

// engineOptions are the engine's options of these flags: how it decides.
func (g *serviceFlags) engineOptions() []engine.Option {
	return []engine.Option{
		engine.WithShadowMode(g.shadowMode), engine.WithQuotaMode(g.quotaMode),
		engine.WithCounting(g.counting), engine.WithNearLimitRatio(g.nearLimitRatio),
	}
}

// options are the gRPC service's options of these flags: its response
// headers.
func (g *serviceFlags) options() []rls.Option {
	return []rls.Option{
		rls.WithResponseHeaders(g.responseHeaders),
		rls.WithDynamicMetadata(g.dynamicMetadata),
		rls.WithHeaderNames(g.headerNames[0], g.headerNames[1], g.headerNames[2]),
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
