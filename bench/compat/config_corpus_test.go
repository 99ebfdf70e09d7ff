package compat

import (
	"regexp"
	"slices"
	"strings"
)

// corpusCase is one file (or directory of files) of testdata/configs and
// what TestConfigAcceptance expects of it.
type corpusCase struct {
	// name is the file without .yaml, or the directory, in testdata/configs.
	name string
	// ref is the reference's verdict: it loads the configuration.
	ref bool
	// refErr is a part of the reference's "Error loading new configuration"
	// log line when it rejects the configuration; slErr a part of sluice
	// check's error when sluice rejects it.
	refErr, slErr string
	// diff names the knownDifference between the verdicts; "" when sluice's
	// verdict is the reference's.
	diff string
	// answers names the knownDifference between the answers when both
	// accept the configuration but read it differently.
	answers string
	settings
}

// settings are the environment of the reference and the flags of sluice
// (check and serve) for a case, besides the test's own.
type settings struct {
	refEnv, slArgs []string
}

// with is c run with the reference's environment refEnv and sluice's flags
// slArgs.
func with(c corpusCase, refEnv []string, slArgs ...string) corpusCase {
	c.refEnv, c.slArgs = refEnv, slArgs
	return c
}

// answersDiffer is a case that both accept and answer differently, by the
// known difference diff.
func answersDiffer(name, diff string) corpusCase {
	return corpusCase{name: name, ref: true, answers: diff}
}

func accepted(name string) corpusCase { return corpusCase{name: name, ref: true} }

func rejected(name, refErr, slErr string) corpusCase {
	return corpusCase{name: name, refErr: refErr, slErr: slErr}
}

// differs is a case whose verdicts differ by the known difference diff:
// the reference's verdict is the opposite of sluice's.
func differs(name, diff, refErr, slErr string) corpusCase {
	return corpusCase{name: name, ref: !difference(diff).sluiceAccepts, refErr: refErr, slErr: slErr, diff: diff}
}

// Messages the reference's YAML decoder (yaml.v2) and key check give.
const (
	refEmptyDomain = "config file cannot have empty domain"
	refEmptyKey    = "descriptor has empty key"
	refNotMap      = "config error, yaml file contains list of type other than map: "
	refChecking    = "error checking config" // validateYamlKeys: a float64 or uint64 leaf
	refNoUnit      = "invalid rate limit unit ''"
	refNoReplace   = "should not have an empty replaces entry"

	slEmptyDomain = "domain: missing or empty: a config file needs a domain"
	slNoUnit      = "rate_limit.unit: missing: want one of"
)

// corpus is every configuration of testdata/configs. valid-* are the bases
// the generated part mutates; the others are, each, one change to such a
// file.
var corpus = []corpusCase{
	// Valid files: every key, each style of YAML.
	accepted("valid-minimal"),
	accepted("valid-all-keys"),
	accepted("valid-domain-only"),
	accepted("valid-anchors"),
	accepted("valid-flow"),
	accepted("valid-deep"),
	accepted("valid-yaml11"),
	differs("deep-64", "limit-deeper", "", "a limit 64 levels deep never applies: a request descriptor has at most 16 entries"),
	accepted("encoding-bom"),
	accepted("encoding-crlf"),
	accepted("alias-scalar"),
	accepted("merge-override"),
	accepted("merge-list"),
	accepted("multi-doc-empty-second"),

	// value
	accepted("value-int"),
	accepted("value-bool"),
	accepted("value-null"),
	accepted("value-empty"),
	accepted("value-star"),
	accepted("value-date"),
	accepted("value-hex"),
	accepted("value-quoted-float"),
	accepted("value-binary"),
	rejected("value-float", refChecking, "is a YAML float"),
	rejected("value-exponent", refChecking, "is a YAML float"),
	rejected("value-uint64", refChecking, "is a YAML integer beyond 64 bits"),
	rejected("value-list", refNotMap+"a", "descriptors[0].value: want a string, got a list"),
	rejected("value-map", "config error, unknown key 'a'", "descriptors[0].value: want a string, got a mapping"),

	// key
	accepted("key-int"),
	accepted("key-wildcard"),
	accepted("key-spaces-unicode"),
	rejected("key-float", refChecking, "is a YAML float"),
	rejected("key-list", refNotMap+"k", "descriptors[0].key: want a string, got a list"),
	rejected("key-map", "cannot unmarshal !!map into string", "descriptors[0].key: want a string, got a mapping"),
	rejected("key-empty", refEmptyKey, "descriptors[0].key: missing or empty"),
	rejected("key-null", refEmptyKey, "descriptors[0].key: missing or empty"),
	rejected("key-missing", refEmptyKey, "descriptors[0].key: missing or empty"),
	rejected("key-missing-nested", refEmptyKey, "descriptors[0].descriptors[0].key: missing or empty"),

	// domain
	accepted("domain-int"),
	rejected("domain-float", refChecking, "is a YAML float"),
	rejected("domain-empty", refEmptyDomain, slEmptyDomain),
	rejected("domain-missing", refEmptyDomain, slEmptyDomain),
	rejected("domain-null", refEmptyDomain, slEmptyDomain),
	rejected("domain-list", refNotMap+"cfg", "domain: want a string, got a list"),
	rejected("domain-map", "cannot unmarshal !!map into string", "domain: want a string, got a mapping"),

	// requests_per_unit
	accepted("rpu-max"),
	accepted("rpu-hex"),
	accepted("rpu-octal"),
	accepted("rpu-octal-0o"),
	accepted("rpu-binary"),
	accepted("rpu-underscore"),
	accepted("rpu-plus"),
	accepted("rpu-null"),
	accepted("rpu-missing"),
	rejected("rpu-quoted", "cannot unmarshal !!str `5` into uint32", `want a whole number, got the string "5"`),
	rejected("rpu-tagged-str", "cannot unmarshal !!str `5` into uint32", `want a whole number, got the string "5"`),
	rejected("rpu-word", "cannot unmarshal !!str `five` into uint32", `requests_per_unit: want a whole number, got "five"`),
	rejected("rpu-float", refChecking, `requests_per_unit: want a whole number, got "5.5"`),
	rejected("rpu-float-whole", refChecking, `requests_per_unit: want a whole number, got "5.0"`),
	rejected("rpu-negative", "cannot unmarshal !!int `-1` into uint32", "requests_per_unit: -1 is out of range [0, 4294967295]"),
	rejected("rpu-over-uint32", "cannot unmarshal !!int `4294967296` into uint32", "requests_per_unit: 4294967296 is out of range [0, 4294967295]"),
	rejected("rpu-over-int64", refChecking, `requests_per_unit: want a whole number, got "99999999999999999999"`),
	rejected("rpu-uint64", refChecking, `requests_per_unit: want a whole number, got "18446744073709551615"`),
	rejected("rpu-exponent", refChecking, `requests_per_unit: want a whole number, got "1e3"`),
	rejected("rpu-inf", refChecking, `requests_per_unit: want a whole number, got ".inf"`),
	rejected("rpu-list", refNotMap+"5", "requests_per_unit: want a whole number, got a list"),
	rejected("rpu-map", "config error, key is not of type string: false", "requests_per_unit: want a whole number, got a mapping"),
	rejected("rpu-bool", "cannot unmarshal !!bool `true` into uint32", `requests_per_unit: want a whole number, got "true"`),
	rejected("rpu-empty-string", "cannot unmarshal !!str `` into uint32", `requests_per_unit: want a whole number, got ""`),

	// unit
	accepted("unit-upper"),
	accepted("unit-mixed-case"),
	accepted("unit-quoted"),
	rejected("unit-bad", "invalid rate limit unit 'minit'", `rate_limit.unit: unknown unit "minit"`),
	rejected("unit-plural", "invalid rate limit unit 'minutes'", `rate_limit.unit: unknown unit "minutes"`),
	rejected("unit-unknown-enum", "invalid rate limit unit 'unknown'", `rate_limit.unit: unknown unit "unknown"`),
	rejected("unit-int", "invalid rate limit unit '60'", `rate_limit.unit: unknown unit "60"`),
	rejected("unit-millisecond", "invalid rate limit unit 'millisecond'", `rate_limit.unit: unknown unit "millisecond"`),
	rejected("unit-trailing-space", "invalid rate limit unit 'minute '", `rate_limit.unit: unknown unit "minute "`),
	rejected("unit-empty", refNoUnit, slNoUnit),
	rejected("unit-null", refNoUnit, slNoUnit),
	rejected("unit-missing", refNoUnit, slNoUnit),
	rejected("unit-list", refNotMap+"minute", "rate_limit.unit: want a string, got a list"),
	rejected("merge-bad-unit", "invalid rate limit unit 'minit'", `rate_limit.unit: unknown unit "minit"`),

	// unlimited
	accepted("unlimited-with-rpu"),
	accepted("unlimited-with-empty-unit"),
	accepted("unlimited-yes"),
	accepted("unlimited-name-replaces"),
	accepted("unlimited-null"),
	differs("unlimited-with-bad-unit", "unlimited-unit", "", `rate_limit.unit: unknown unit "fortnight"`),
	rejected("unlimited-quoted", "cannot unmarshal !!str `true` into bool", `want true or false, got the string "true"`),
	rejected("unlimited-with-unit", "should not specify rate limit unit when unlimited", "rate_limit.unit: must not be set when unlimited"),
	rejected("unlimited-false-no-unit", refNoUnit, slNoUnit),
	rejected("unlimited-int", "cannot unmarshal !!int `1` into bool", `rate_limit.unlimited: want true or false, got "1"`),

	// the descriptor's booleans
	accepted("shadow-on"),
	accepted("shadow-null"),
	rejected("shadow-quoted", "cannot unmarshal !!str `true` into bool", `want true or false, got the string "true"`),
	rejected("quota-quoted-false", "cannot unmarshal !!str `false` into bool", `want true or false, got the string "false"`),
	rejected("value-to-metric-tagged", "cannot unmarshal !!str `true` into bool", `want true or false, got the string "true"`),
	rejected("shadow-int", "cannot unmarshal !!int `1` into bool", `shadow_mode: want true or false, got "1"`),
	rejected("shadow-list", refNotMap+"true", "shadow_mode: want true or false, got a list"),
	rejected("detailed-metric-word", "cannot unmarshal !!str `enabled` into bool", `detailed_metric: want true or false, got "enabled"`),

	// duplicates
	accepted("dup-other-parents"),
	accepted("dup-same-key-other-values"),
	rejected("dup-key-value", "duplicate descriptor composite key 'cfg.k_v'", `descriptors[1].key: duplicate descriptor "k" with value "v"`),
	rejected("dup-key-only", "duplicate descriptor composite key 'cfg.k'", `descriptors[1].key: duplicate descriptor "k" with no value`),
	rejected("dup-nested", "duplicate descriptor composite key 'cfg.k.n_v'", `descriptors[0].descriptors[1].key: duplicate descriptor "n" with value "v"`),
	rejected("dup-empty-value", "duplicate descriptor composite key 'cfg.k'", `descriptors[1].key: duplicate descriptor "k" with no value`),
	rejected("dup-without-limits", "duplicate descriptor composite key 'cfg.k'", `descriptors[1].key: duplicate descriptor "k" with no value`),
	differs("dup-underscore-collision", "key-value-collision", "duplicate descriptor composite key 'cfg.a_b'", ""),
	differs("dup-mapping-key", "duplicate-yaml-key", "", "descriptors[0].value: key given twice"),
	differs("dup-mapping-key-root", "duplicate-yaml-key", "", "domain: key given twice"),

	// replaces and name
	accepted("replaces-unknown-name"),
	accepted("replaces-without-own-name"),
	accepted("replaces-empty-list"),
	accepted("replaces-null"),
	accepted("replaces-each-other"),
	accepted("name-duplicate"),
	accepted("name-empty"),
	accepted("name-int"),
	rejected("replaces-self", "replaces should not contain name of same descriptor", `rate_limit.replaces: a rule must not replace itself ("me")`),
	rejected("replaces-empty-entry", refNoReplace, "replaces[0].name: missing or empty"),
	rejected("replaces-empty-name", refNoReplace, "replaces[0].name: missing or empty"),
	rejected("replaces-null-name", refNoReplace, "replaces[0].name: missing or empty"),
	rejected("replaces-string", "cannot unmarshal !!str `other` into []config.yamlReplaces", `rate_limit.replaces: want a list, got "other"`),
	rejected("replaces-list-of-strings", refNotMap+"other", `rate_limit.replaces[0]: want a mapping, got "other"`),
	rejected("replaces-map", "cannot unmarshal !!map into []config.yamlReplaces", "rate_limit.replaces: want a list, got a mapping"),
	rejected("name-list", refNotMap+"false", "rate_limit.name: want a string, got a list"),

	// share_threshold
	accepted("share-threshold-false-exact"),
	rejected("share-threshold-exact", "share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_v'",
		`descriptors[0].share_threshold: can only be used with a wildcard value (one with a '*'), not "v"`),
	rejected("share-threshold-no-value", "but found key 'k'", `descriptors[0].share_threshold: can only be used with a wildcard value`),
	rejected("share-threshold-nested-exact", "but found key 'n_x'", `descriptors[0].descriptors[0].share_threshold: can only be used with a wildcard value`),
	rejected("share-threshold-quoted", "cannot unmarshal !!str `true` into bool", `want true or false, got the string "true"`),
	differs("share-threshold-key-wildcard", "share-threshold-key", "", `descriptors[0].share_threshold: can only be used with a wildcard value (one with a '*'), not ""`),
	differs("share-threshold-middle", "middle-wildcard-share", "share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_/api*v1'", ""),
	with(rejected("share-threshold-middle-trailing", "share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_/api*v1'",
		`descriptors[0].share_threshold: can only be used with a wildcard value (ending in '*'), not "/api*v1"`), nil, "--wildcards", "trailing"),

	// wildcards
	answersDiffer("wildcard-middle", "middle-wildcard"),
	with(accepted("wildcard-middle-trailing"), nil, "--wildcards", "trailing"),
	differs("wildcard-shadowed", "never-matches", "", `descriptors[1].value: wildcard "ab*" never matches: every value it matches is matched first by "a*" (line 4)`),
	differs("default-beside-star", "never-matches", "", `descriptors[1].key: descriptor "k" with no value never matches: the wildcard value "*" (line 4) matches every value of "k" first`),

	// unknown keys, at each level
	rejected("unknown-key-root", "config error, unknown key 'version'", "version: unknown key (want one of domain, descriptors)"),
	rejected("unknown-key-descriptor", "config error, unknown key 'comment'", "descriptors[0].comment: unknown key"),
	rejected("unknown-key-nested-descriptor", "config error, unknown key 'limit'", "descriptors[0].descriptors[0].limit: unknown key"),
	rejected("unknown-key-rate-limit", "config error, unknown key 'burst_size'", "rate_limit.burst_size: unknown key"),
	rejected("unknown-key-replaces", "config error, unknown key 'reason'", "rate_limit.replaces[0].reason: unknown key (want one of name)"),
	rejected("unknown-key-capitalised", "config error, unknown key 'Key'", "descriptors[0].Key: unknown key"),
	rejected("unknown-key-camel-case", "config error, unknown key 'requestsPerUnit'", "rate_limit.requestsPerUnit: unknown key"),
	rejected("unknown-key-in-anchor", "config error, unknown key 'base'", "base: unknown key"),
	rejected("key-int-as-yaml-key", "config error, key is not of type string: 1", "descriptors[0].1: unknown key"),
	rejected("key-bool-as-yaml-key", "config error, key is not of type string: true", "true: unknown key"),
	rejected("key-null-as-yaml-key", "config error, key is not of type string: <nil>", "~: unknown key"),

	// known keys in the wrong place
	differs("misplaced-unit-in-descriptor", "misplaced-key", "", "descriptors[0].unit: unknown key"),
	differs("misplaced-key-at-root", "misplaced-key", "", "key: unknown key (want one of domain, descriptors)"),
	differs("misplaced-domain-in-descriptor", "misplaced-key", "", "descriptors[0].domain: unknown key"),
	differs("misplaced-descriptors-in-rate-limit", "misplaced-key", "", "rate_limit.descriptors: unknown key"),
	differs("misplaced-value-in-rate-limit", "misplaced-key", "", "rate_limit.value: unknown key"),
	differs("misplaced-unit-in-replaces", "misplaced-key", "", "replaces[0].unit: unknown key (want one of name)"),
	differs("misplaced-name-in-descriptor", "misplaced-key", "", "descriptors[0].name: unknown key"),
	differs("misplaced-rate-limit-at-root", "misplaced-key", "", "rate_limit: unknown key (want one of domain, descriptors)"),

	// sluice's extensions
	differs("ext-algorithm", "extension", "config error, unknown key 'algorithm'", ""),
	differs("ext-window", "extension", "config error, unknown key 'window'", ""),
	differs("ext-burst", "extension", "config error, unknown key 'burst'", ""),
	differs("ext-failure-mode", "extension", "config error, unknown key 'failure_mode'", ""),
	differs("ext-rate-limits", "extension", "config error, unknown key 'rate_limits'", ""),
	differs("ext-unit-multiplier", "extension", "config error, unknown key 'unit_multiplier'", ""),
	differs("ext-metadata", "extension", "config error, unknown key 'metadata'", ""),

	// the structure
	accepted("descriptors-empty-list"),
	accepted("descriptors-null"),
	accepted("nested-descriptors-null"),
	accepted("rate-limit-null"),
	rejected("descriptors-map", "cannot unmarshal !!map into []config.YamlDescriptor", "descriptors: want a list, got a mapping"),
	rejected("descriptors-string", "cannot unmarshal !!str `k` into []config.YamlDescriptor", `descriptors: want a list, got "k"`),
	rejected("descriptors-null-item", refNotMap+"<nil>", "descriptors[0]: want a descriptor mapping with a key, got null"),
	rejected("descriptors-scalar-item", refNotMap+"k", `descriptors[0]: want a mapping, got "k"`),
	rejected("descriptors-list-item", refNotMap+"[key k]", "descriptors[0]: want a mapping, got a list"),
	rejected("descriptors-empty-item", refEmptyKey, "descriptors[0]: want a descriptor mapping with a key, got a mapping"),
	rejected("rate-limit-empty-map", refNoUnit, slNoUnit),
	rejected("rate-limit-list", "cannot unmarshal !!seq into config.YamlRateLimit", "rate_limit: want a mapping, got a list"),
	rejected("rate-limit-string", "cannot unmarshal !!str `5/minute` into config.YamlRateLimit", `rate_limit: want a mapping, got "5/minute"`),
	rejected("top-level-list", "cannot unmarshal !!seq into map", "want a mapping, got a list"),
	rejected("top-level-scalar", "cannot unmarshal !!str `cfg` into map", `want a mapping, got "cfg"`),
	differs("deep-70", "nesting-depth", "", "descriptors nested more than 64 levels deep"),

	// whole files
	rejected("empty-file", refEmptyDomain, slEmptyDomain),
	rejected("comments-only", refEmptyDomain, slEmptyDomain),
	rejected("whitespace-only", refEmptyDomain, slEmptyDomain),
	rejected("document-marker-only", refEmptyDomain, slEmptyDomain),
	// Both reject, for other reasons: the reference reads the first,
	// empty, document only.
	rejected("multi-doc-empty-first", refEmptyDomain, "a second YAML document: put one domain per file"),
	differs("multi-doc-second-domain", "second-document", "", "a second YAML document: put one domain per file"),
	differs("multi-doc-invalid-second", "second-document", "", "a second YAML document: put one domain per file"),
	rejected("yaml-tab-indent", "found a tab character that violates indentation", "invalid YAML: found a tab character that violates indentation"),
	rejected("yaml-unclosed-quote", "found unexpected end of stream", "invalid YAML: found unexpected end of stream"),
	rejected("yaml-bad-indent", "mapping values are not allowed in this context", "invalid YAML: mapping values are not allowed in this context"),
	rejected("alias-undefined", "unknown anchor 'missing' referenced", "invalid YAML: unknown anchor 'missing' referenced"),
	rejected("encoding-invalid-utf8", "invalid leading UTF-8 octet", "invalid YAML: invalid leading UTF-8 octet"),

	// Directories of several files, loaded together.
	accepted("dir-two-domains"),
	accepted("dir-yml-extension"),
	accepted("dir-subdirectory"),
	rejected("dir-duplicate-domain", "duplicate domain 'cfg' in config file", `domain: duplicate domain "cfg"`),
	with(accepted("dir-merge-domain"), []string{"MERGE_DOMAIN_CONFIG=true"}, "--merge-domains"),
	with(rejected("dir-merge-duplicate", "duplicate descriptor composite key 'cfg.user'", `b.yaml:3: descriptors[0].key: duplicate descriptor "user" with no value at this level (cfg.user; first at `),
		[]string{"MERGE_DOMAIN_CONFIG=true"}, "--merge-domains"),
	rejected("dir-one-bad-file", "cannot unmarshal !!int `-5` into uint32", "requests_per_unit: -5 is out of range"),
	differs("dir-no-extension", "file-extension", "", "no *.yaml or *.yml files"),
	differs("dir-readme", "non-yaml-file", "README.md: error loading config file", ""),
	differs("dir-hidden-file", "dotfile", "duplicate domain 'cfg' in config file", ""),
}

// Classifications of a known difference.
const (
	extension  = "a documented sluice extension"
	documented = "deliberate, documented"
)

// knownDifference is a difference between the reference's and sluice's
// verdicts (or, with answers, between their answers on a configuration
// both load) that this test found and that is, for now, accepted. Any other
// difference fails the test.
type knownDifference struct {
	id string
	// sluiceAccepts: sluice accepts what the reference rejects (class (a),
	// sluice too lax); otherwise sluice rejects what the reference accepts
	// (class (b), the file is not "accepted unchanged").
	sluiceAccepts bool
	// answers: both load the configuration but answer differently.
	answers bool
	kind    string
	reason  string
	// match recognises the difference in a generated mutation from the two
	// verdicts; nil when only the corpus has it.
	match func(ref, sl verdict) bool
}

// referenceKeys are the keys the reference knows (validKeys in
// src/config/config_impl.go); it accepts each of them anywhere.
var referenceKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold"}

// extensionKeys are the keys sluice adds (service/config/parse.go).
var extensionKeys = []string{"algorithm", "window", "burst", "failure_mode", "rate_limits", "unit_multiplier", "metadata"}

var (
	refUnknownKey = regexp.MustCompile(`config error, unknown key '([^']*)'`)
	slUnknownKey  = regexp.MustCompile(`: (?:\S+\.)?([^.\s]+): unknown key \(want one of`)
)

var knownDifferences = []knownDifference{
	{
		id: "extension", sluiceAccepts: true, kind: extension,
		reason: "algorithm, window, burst, failure_mode, rate_limits, unit_multiplier and metadata are sluice's " +
			"(service/rls/COMPAT.md, service/config/doc.go); the reference's validKeys lacks them: " +
			"\"config error, unknown key '...'\"",
		match: func(ref, sl verdict) bool {
			m := refUnknownKey.FindStringSubmatch(ref.msg)
			return m != nil && slices.Contains(extensionKeys, m[1]) && sl.accepted
		},
	},
	{
		id: "misplaced-key", kind: documented,
		reason: "a key of the reference's in the wrong place (unit on a descriptor, key at the root, name in a " +
			"replaces entry): the reference checks every key against one flat list (validateYamlKeys) and " +
			"its YAML decoder ignores the fields a struct lacks, so the key is silently ignored; sluice checks " +
			"keys where they stand (service/config/doc.go: \"Deliberate differences\")",
		match: func(ref, sl verdict) bool {
			m := slUnknownKey.FindStringSubmatch(sl.msg)
			return ref.accepted && m != nil && slices.Contains(referenceKeys, m[1])
		},
	},
	{
		id: "key-value-collision", sluiceAccepts: true, kind: documented,
		reason: "key \"a_b\" and key \"a\" with value \"b\" are one \"a_b\" in the reference's map of a level: " +
			"\"duplicate descriptor composite key\"; sluice compares (key, value) pairs (service/config/doc.go)",
	},
	{
		id: "unlimited-unit", kind: documented,
		reason: "unlimited: true with a unit that is not one: the reference only rejects a valid unit next to " +
			"unlimited and ignores an invalid one; sluice rejects the unknown unit (service/config/doc.go)",
		match: func(ref, sl verdict) bool { return ref.accepted && strings.Contains(sl.msg, "unknown unit") },
	},
	{
		id: "second-document", kind: documented,
		reason: "a second YAML document in a file: the reference's yaml.Unmarshal reads the first and silently " +
			"drops the others (their domains never load, their errors never show); sluice rejects it " +
			"(service/config/doc.go)",
	},
	{
		id: "duplicate-yaml-key", kind: documented,
		reason: "a key given twice in one YAML mapping (value: a, value: b; domain twice): the reference's " +
			"yaml.v2 Unmarshal keeps the last and says nothing; sluice rejects it (\"key given twice\", " +
			"service/config/doc.go). YAML requires unique keys and the silently dropped value is " +
			"almost surely a mistake",
		match: func(ref, sl verdict) bool { return ref.accepted && strings.Contains(sl.msg, "key given twice") },
	},
	{
		id: "nesting-depth", kind: documented,
		reason: "descriptors nested more than 64 levels deep: the reference loads any depth; sluice bounds " +
			"it (parse.go maxDepth, a guard on memory; service/config/doc.go). No Envoy rate limit action " +
			"list is that long",
	},
	{
		id: "middle-wildcard", answers: true, kind: documented,
		reason: "a '*' before the end of a value (\"bar*b\", \"foo*bar*baz\"): a wildcard in the reference's main " +
			"branch since March 2026 (its pull request 1085) and in sluice by default (--wildcards anywhere), a " +
			"literal byte in the version make compat builds; sluice --wildcards trailing reads it as that version " +
			"does (the case wildcard-middle-trailing answers the same). docs/compatibility.md: \"Wildcards\"",
	},
	{
		id: "middle-wildcard-share", sluiceAccepts: true, kind: documented,
		reason: "share_threshold on a value whose '*' is not at its end: accepted by the reference's main branch " +
			"since March 2026 and by sluice by default; refused by the version make compat builds, and by " +
			"sluice --wildcards trailing (the case share-threshold-middle-trailing)",
	},
	{
		id: "never-matches", kind: documented,
		reason: "a descriptor that can never match: a wildcard whose every value an earlier wildcard of its key " +
			"matches first, a key-only default beside a \"*\" of its key. The reference loads it and it silently " +
			"never applies; sluice refuses it with its line (service/config/doc.go, docs/compatibility.md)",
		match: func(ref, sl verdict) bool { return ref.accepted && strings.Contains(sl.msg, "never matches") },
	},
	{
		id: "limit-deeper", kind: documented,
		reason: "a limit nested deeper than a request descriptor's entries can reach (--max-descriptor-entries, 16): " +
			"the reference loads it, and a request as deep would reach it; sluice refuses more entries per " +
			"descriptor (docs/bounds.md), so the limit could never apply, and it refuses the limit with its line",
		match: func(ref, sl verdict) bool { return ref.accepted && strings.Contains(sl.msg, "never applies") },
	},
	{
		id: "share-threshold-key", kind: documented,
		reason: "share_threshold on a descriptor with no value whose key ends in '*': the reference checks " +
			"the '*' on its \"key_value\" string, which is the key alone, and so loads a key wildcard (it " +
			"matches every request key with that prefix, an accident of those strings); sluice requires a " +
			"wildcard value (service/config/doc.go: a wildcard only matches its own key)",
	},
	{
		id: "file-extension", kind: documented,
		reason: "a directory whose configuration file has no .yaml/.yml extension: the reference (goruntime) " +
			"loads every file of the directory, sluice serve --config DIR only *.yaml and *.yml " +
			"(README's flag table; config.Load); sluice check/serve FILE loads the file itself",
	},
	{
		id: "non-yaml-file", sluiceAccepts: true, kind: documented,
		reason: "a README.md next to the configuration: the reference loads it as YAML and fails; sluice " +
			"only reads *.yaml and *.yml (README's flag table; config.Load)",
	},
	{
		id: "dotfile", sluiceAccepts: true, kind: documented,
		reason: "a hidden file (.old.yaml, an editor's or Kubernetes' ..data): the reference loads it " +
			"(RUNTIME_IGNOREDOTFILES defaults to false) and here finds the domain twice; sluice skips hidden " +
			"files (service/config/doc.go), as the reference does with RUNTIME_IGNOREDOTFILES=true",
	},
}

func difference(id string) knownDifference {
	for _, d := range knownDifferences {
		if d.id == id {
			return d
		}
	}
	panic("unknown known difference " + id)
}

// class is the brief's classification of a difference: (a) sluice accepts
// what the reference rejects, (b) the reverse.
func (d knownDifference) class() string {
	switch {
	case d.answers:
		return "both accept, answers differ"
	case d.sluiceAccepts:
		return "(a) sluice accepts what the reference rejects"
	default:
		return "(b) sluice rejects what the reference accepts"
	}
}
