// Package rls serves Envoy's rate-limit service protocol,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit: it translates
// each request into an service/engine Request and the engine's Result into
// the response, and decides nothing itself. The protocol's wire types
// (go-control-plane's generated code) stay in this package and in the HTTP
// handlers that speak the same JSON; the engine and the store only ever see
// plain values.
//
// The behaviour follows envoyproxy/ratelimit (the reference) where it is
// sound, and differs deliberately where it is not; COMPAT.md lists both,
// and package engine says how a request is decided.
package rls
