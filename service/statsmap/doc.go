// Package statsmap turns statsd statistics into Prometheus metrics as
// prometheus/statsd_exporter does, the way envoyproxy/ratelimit serves its
// statistics with USE_PROMETHEUS: a Mapper reads statsd_exporter's
// mapping language (glob and regex matches, names and labels with $n,
// match_metric_type, histogram and summary observers with their options,
// the drop action, help, scale and ttl; honor_labels is accepted and has
// nothing to do, the statistics carry no tags), and an Exporter applies it
// to the statistics it receives and serves the result. A key the language
// does not have, or a value it would refuse, is an error of Parse; so
// mistakes show at start instead of as missing metrics.
//
// DefaultMapping is the mapping of envoyproxy/ratelimit
// (src/stats/prom/default_mapper.yaml): its per-limit counters as
// ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode}
// with the labels domain, key1 and key2; its errors, gRPC requests, their
// response time and configuration loads.
package statsmap
