// Package storeapi serves sluice serve's store over gRPC: the store API,
// protocol sluice.store.v1 (api/sluice/store/v1/store.proto), whose Go
// client is package remotestore. With it a fleet decides through a sluice
// serve fleet instead of holding the store's credentials (Redis's), and a
// region's sluice serve uses a home sluice serve as its shared store.
//
// A Server translates: each method checks its request against the
// service's bounds (Bounds: rate, burst, period, cost, permits; the key,
// the holder and the size of an AllowMulti by the library's bounds),
// before the store is called, then passes it to the store and writes the
// answer, field for field (internal/storewire). Nothing is decided here:
// the store, with its failover and local tier, decides as it does for the
// service's own requests, and a denial is a Decision. An invalid request
// is InvalidArgument naming the field, a capability the store lacks
// Unimplemented, each with a detail that remotestore turns back into the
// library's error; a store that does not answer is Unavailable.
//
// Grant (sluice.Granter: the units a region's sluice serve holds and
// decides from, package region) is answered by the granter under the
// store (WithGranter: its Redis or memory store, not its failover, since
// a grant is never decided by a failure mode); every field of the
// request is checked first, by the bounds of sluice.GrantRequest.
//
// Interceptors authenticates every call before its handler runs, by the
// admin API's rules (a bearer token file or a client CA; loopback callers
// only with neither), and counts the calls in the service's metrics.
// MaxMessageSize bounds a request's size.
package storeapi
