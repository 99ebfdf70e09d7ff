// Package engine is the service's decision: one request (a domain, its
// descriptors with their entries, overrides and hits) against the loaded
// configuration, giving a status per descriptor and an overall code. It
// speaks plain Go: the protocols (Envoy's gRPC service in service/rls, the
// HTTP endpoints in service/server) translate their wire types into a
// Request and a Result out of it, and decide nothing themselves.
//
// The behaviour follows envoyproxy/ratelimit (the reference) where it is
// sound, and differs deliberately where it is not; service/rls/COMPAT.md
// lists both. In short: every descriptor is matched against the
// configuration; the limits that count only what they admit
// (sluice.CountAdmitted, the default) are decided together, all or nothing,
// so that a denied request is counted by none of them; limits that count
// every hit (sluice.CountAll, the reference's counting) are charged their
// hits whatever the others decide, and decided first; shadow and quota-mode
// limits are decided afterwards; a descriptor with NegativeHits gives its
// hits back; unmatched descriptors and unknown domains are OK with no limit;
// unlimited descriptors are OK with nothing to count.
package engine
