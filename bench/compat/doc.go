// Package compat is a differential test of sluice serve against
// envoyproxy/ratelimit (the reference) on gRPC ShouldRateLimit and on the
// HTTP POST /json: both run side by side on loopback with the same YAML
// (testdata/compat.yaml), get the same requests, and their responses are
// compared field by field, allowing only the differences that
// service/rls/COMPAT.md documents. fixedDifferences (compare_test.go) lists
// what this test found and sluice fixed; a subtest (fixed/...) reproduces
// each, and fails if the difference comes back.
//
// Per store: request errors; the documented differences; one case per
// configuration feature (wildcards, nesting, share_threshold, every unit
// from second to year, detailed_metric and value_to_metric, overrides,
// shadow and quota mode, replaces); the fixed differences; the
// default RateLimit-* header names; concurrency (32 goroutines at once on
// shared counters: every hit counted under the limits, exactly the limit
// admitted over them); random sequences. Then over /json: the status codes
// of malformed and unusual HTTP requests (the differences are listed in the
// summary), the cases, the fixed differences and a fifth of the random
// sequences.
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
// number of random sequences per store (default 1500; a fifth of them over
// /json). SLUICE_COMPAT_SLUICE_CONFIG gives sluice another YAML than the
// reference's, to check that the comparison fails when they disagree.
//
// sluice runs twice, on its memory store and on a redis-server of its own
// (--redis); each run is paired with its own reference on its own
// redis-server, so that no counter is shared between the runs.
//
// TestCompatModes (modes_test.go) compares the service-wide settings:
// SHADOW_MODE with renamed headers, and QUOTA_MODE.
//
// swapenv_test.go runs sluice as it runs in the reference's place,
// configured only by the reference's environment variables, beside the
// reference: the answer with Redis stopped (gRPC Unknown for both),
// RESPONSE_DYNAMIC_METADATA's dynamic_metadata, gRPC on a Unix socket
// (GRPC_UDS), and memcached (BACKEND_TYPE=memcache, each on its own real
// memcached: the decisions on fresh keys; with memcached stopped, the
// answers compared in full, each request decided as if nothing had been
// counted). memcache_swap_test.go runs both on one memcached with
// CACHE_KEY_PREFIX: hits counted by one are counted by the other when it
// takes over within the window, either way.
//
// TestCompatStats (stats_test.go) compares the statistics: the reference
// and sluice, both configured by the reference's environment only, get the
// same traffic (testdata/stats.yaml: every way the reference names a
// limit's statistics), and a receiver of the test's for each compares
// their statsd streams (TCP; UDP with EXTRA_TAGS; DogStatsD with a
// mogrifier; TCP with LOCAL_CACHE_SIZE_IN_BYTES, whose cache's gauges are
// compared by value too: counters name for name and value for value, no
// counter sent at 0, gauges by name, timings by count) and their
// Prometheus endpoints (also with LOCAL_CACHE_SIZE_IN_BYTES)
// (the default mapping; a mapping file at another PROMETHEUS_PATH:
// families, label values and the limits', errors', calls' and
// configuration loads' values). It waits for counts, never for a time:
// markers after the traffic, then every call counted and timed.
//
// TestConfigAcceptance (config_test.go) compares which configuration files
// each accepts: a corpus (testdata/configs, expectations and the known
// differences with their reasons in config_corpus_test.go) and random
// single mutations of its valid files (SLUICE_COMPAT_SEED replays them,
// SLUICE_COMPAT_CONFIG_MUTANTS sets how many, default 300). The reference
// starts on each and gets one request (a bad file makes it answer "no rate
// limit configuration loaded"); sluice check judges it for sluice, and
// sluice serve must refuse to start on what check rejects. Where both
// accept, every limit the reference loaded is asked for on both.
package compat
