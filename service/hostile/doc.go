// Package hostile holds the hostile-client suite of sluice serve: tests
// that build the sluice command (with the hostiletest build tag, which adds
// a store path that panics on purpose), start it on loopback ports over the
// memory store and over a real redis-server, and attack it as a hostile
// client would: huge and overflowing limits, descriptor floods, slow
// headers and bodies, idle gRPC streams and connections, spoofed and
// malformed identity headers, invalid UTF-8 keys, a panicking handler, and
// a key's permits whose leases end together.
//
// During and after each attack the suite checks that a normal request
// still answers within 100 ms, that goroutines and resident memory return
// near their baseline, that Redis ran no command of 1 ms or more, and that
// SIGTERM ends the process within its shutdown timeout. README.md lists the
// classes, their bounds and how to run them, also against a binary of
// another revision (HOSTILE_BINARY, scripts/hostile-against.sh), judged by
// the same checks and bounds.
//
// The package has no code outside its tests.
package hostile
