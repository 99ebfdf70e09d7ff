// Package config loads the rate-limit configuration of sluice serve: the
// YAML of envoyproxy/ratelimit, accepted unchanged, plus sluice extensions.
//
// A file holds one domain:
//
//	domain: api
//	descriptors:
//	  - key: remote_address
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 20
//	  - key: path
//	    value: "/search*"          # wildcard: any value with this prefix
//	    rate_limits:               # sluice: several limits, all must admit
//	      - {algorithm: sliding_log, window: 30s, requests_per_unit: 10}
//	      - {unit: day, requests_per_unit: 1000}
//
// The reference's keys, strictness, validation and matching are kept: unknown
// keys are errors; at each level of a request descriptor an exact key/value
// node wins over wildcard values (tried in config order), which win over the
// key-only default; the limits that apply are those of the node matched by
// the request descriptor's last entry.
//
// sluice extensions on a rate_limit: algorithm (fixed_window by default, as
// the reference), window (any Go duration such as 30s, instead of unit), burst
// (token_bucket and gcra), failure_mode (open or closed); and rate_limits, a
// list of such objects on one node.
//
// Every error is an *Error naming the file, the line and the offending key.
package config
