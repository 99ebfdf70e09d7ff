// Package rls serves Envoy's rate-limit service protocol,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, on top of a
// sluice.Store and an internal/config configuration. The protocol's wire
// types (go-control-plane's generated code) stay in this package and in the
// HTTP handlers that speak the same JSON; the store only ever sees keys,
// limits and costs.
//
// The behaviour follows envoyproxy/ratelimit (the reference) where it is
// sound, and differs deliberately where it is not; COMPAT.md lists both.
// In short: every descriptor of a request is matched against the
// configuration; the limits of all matched descriptors (and all the limits
// of one node, with the rate_limits extension) are decided together,
// all-or-nothing, so that a denied request is counted by no limit; shadow
// and quota-mode limits are decided afterwards, counted only when the
// request is admitted; unmatched descriptors and unknown domains are OK with
// no limit; unlimited descriptors are OK with limit_remaining MaxUint32.
package rls
