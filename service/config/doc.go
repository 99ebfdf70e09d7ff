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
//	    value: "/search*"          # wildcard: any value starting with /search
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
// A '*' in a value is a wildcard matching any run of bytes ("bar*b",
// "foo*bar*baz"), as in the reference's main branch since March 2026;
// Options.Wildcards = WildcardsTrailing reads only a trailing '*' as one,
// as its earlier versions, which take any other '*' literally. Matching is
// linear in the value and the pattern. Options.MergeDomains merges the
// files of one domain as the reference's MERGE_DOMAIN_CONFIG does.
//
// sluice extensions on a rate_limit: algorithm (fixed_window by default, as
// the reference), window (any Go duration such as 30s, instead of unit), burst
// (token_bucket and gcra), failure_mode (closed, error, open or uncounted); and rate_limits, a
// list of such objects on one node.
//
// The reference's later keys are accepted too: value_to_metric,
// share_threshold, quota_mode, metadata (free-form, not checked) and
// unit_multiplier. requests_per_unit: 0, the reference's way to block a
// value, loads as a Rule with Deny set.
//
// Every error is an *Error naming the file, the line and the offending key.
//
// Deliberate differences from the reference:
//   - Keys are checked where they stand: a known key in the wrong place
//     (unit directly under a descriptor) is an error, where the reference
//     accepts any known key anywhere and ignores it.
//   - Descriptors are compared as (key, value) pairs and counting keys are
//     escaped, so key "a_b" and key "a" with value "b" neither collide as
//     duplicates nor share a counter, as they can in the reference's
//     "key_value" strings; a wildcard only matches its own key.
//   - unlimited with an unknown unit, and a second YAML document in a file,
//     are errors rather than ignored.
//   - A descriptor that could never match is an error: a wildcard covered
//     by an earlier wildcard of its key, a key-only default beside a
//     wildcard that matches every value, a limit deeper than
//     Options.MaxEntries (a request descriptor's most entries). The
//     reference loads them, and they never apply.
//   - A wildcard value has at most MaxWildcardStars wildcards and
//     MaxWildcardBytes bytes.
//   - A YAML key given twice in one mapping is an error (YAML forbids it;
//     the reference keeps the last silently), and descriptors nest at most
//     64 levels deep.
//   - In a directory, only *.yaml and *.yml files are read, and names
//     starting with "." (files and directories) are skipped; the reference
//     reads every file, hidden ones too unless RUNTIME_IGNOREDOTFILES is
//     set. Subdirectories are read, as in the reference.
//
// Scalars are read as the reference's decoder (yaml.v2) reads them: a
// number or a boolean written as a string ("5", !!str true) is an error
// where a number or a boolean is wanted; a float, or an integer beyond 64
// bits, is an error where a string is wanted (quote it); a !!binary value is
// its decoded bytes.
package config
