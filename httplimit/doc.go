// Package httplimit puts a sluice.Limiter in front of HTTP, in both
// directions.
//
// Inbound, a [Middleware] (its Handler method has the shape
// func(http.Handler) http.Handler, so it fits net/http, chi, gorilla and
// anything else that speaks http.Handler) decides every request against one
// or more [Policy] values all-or-nothing, keyed by [KeyFunc]s: an API key or
// tenant header, a context value, the ServeMux route pattern, the client IP
// (taken from X-Forwarded-For or Forwarded only through trusted proxies) or
// a composition of them. A denied request gets 429, a Retry-After in whole
// seconds rounded up and an application/problem+json body naming the
// violated policy. Responses carry, as selected, X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset, and the RateLimit-Policy and
// RateLimit structured fields of draft-ietf-httpapi-ratelimit-headers-11.
//
// Outbound, a [Transport] (an http.RoundTripper) waits for an upstream's
// shared quota before each request, so that every replica sharing the store
// stays inside it together, and records an upstream's 429 or 503
// Retry-After in the shared store so that the whole fleet pauses, not only
// the replica that was told.
//
// A rate limits how often; [Concurrency] and [ConcurrencyTransport] limit
// how many at once, on a sluice.Semaphore shared by the fleet. Inbound, a
// Concurrency middleware holds at most Max requests of a key (a tenant, an
// API key, a route) in flight, each under a leased permit that is released
// however the handler ends (a return, a panic, a timeout, a client that
// went away) and extended while a long request runs; a denial gets 429 (or
// 503) with Retry-After and a problem body, as above. Outbound, a
// ConcurrencyTransport holds at most Max calls to an upstream in flight,
// each permit released when the response body is closed or read to its
// end, and waits for a free permit or fails fast.
//
// The package imports only the standard library and sluice.
package httplimit
