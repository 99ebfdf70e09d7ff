// Package compat is a differential test of sluice serve against
// envoyproxy/ratelimit (the reference) on gRPC ShouldRateLimit: both run
// side by side on loopback with the same YAML (testdata/compat.yaml), get
// the same requests, and their responses are compared field by field,
// allowing only the differences that internal/rls/COMPAT.md documents.
// fixedDifferences (compare_test.go) lists what this test found and sluice
// fixed; a subtest reproduces each.
//
// The reference is a separate binary: set SLUICE_REFERENCE to its
// service_cmd, or run
//
//	make compat
//
// which builds it from the Go module proxy and runs
//
//	cd bench && SLUICE_REFERENCE=/path/to/service_cmd go test -count=1 -v ./compat
//
// Without SLUICE_REFERENCE the tests skip. SLUICE_COMPAT_SEED replays a
// seed (the test logs the one it used), SLUICE_COMPAT_SEQUENCES sets the
// number of random sequences per store (default 1500).
//
// sluice runs twice, on its memory store and on a redis-server of its own
// (--redis); each run is paired with its own reference on its own
// redis-server, so that no counter is shared between the runs.
package compat
