// Package service is the home of sluice serve: the packages below it are
// the service built on the library, and nothing in the library imports them.
//
//   - config: the rules (envoyproxy/ratelimit's YAML and sluice's keys),
//     from files or from xDS resources, validated and matched
//   - source: the configuration put in force (at start, on a reload of
//     files, on an xDS update) through one Applier
//   - engine: the decision of one request against the rules in force
//   - rls, server: Envoy's gRPC protocol and the HTTP API, translated into
//     the engine's requests; check: what POST /v1/check accepts
//   - metrics: what the service observes of itself (decisions, every store
//     call, the breaker) and its Prometheus metrics
//   - admin, topk, status: the admin listener's API, the keys denied most
//     and the status page
//   - xds, certs, tracing, gctune, problem: the configuration's source over
//     xDS, rotating certificates, OpenTelemetry spans, memory tuning and the
//     problem+json errors
//   - listen, livefile: the listeners' limits (connections, write
//     deadlines, gRPC streams before their message) and the reading of the
//     files re-read while serving
//   - hostile: a black-box suite of hostile clients against the built binary
//
// The command in cmd/sluice only reads its flags and wires these together.
// These packages are the service's implementation, not a library: their
// API changes with the service. Go programs use the library (package
// sluice and its stores); other programs use the service's protocols.
package service
