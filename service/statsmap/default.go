package statsmap

import _ "embed"

// DefaultMapping is envoyproxy/ratelimit's mapping of its statistics, the
// one its USE_PROMETHEUS uses unless PROMETHEUS_MAPPER_YAML names another.
//
//go:embed default.yaml
var DefaultMapping []byte
