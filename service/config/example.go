package config

// defaultExample is the configuration sluice serve uses when started
// without --config.
const defaultExample = `# sluice serve's built-in example. Any envoyproxy/ratelimit file works
# unchanged; algorithm, window, burst, failure_mode and rate_limits are
# sluice extensions.
domain: example
descriptors:
  # 20 requests per minute per client address, counted in fixed windows
  # (the reference's algorithm).
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 20

  # 5 requests in any 30 seconds per API key: a true sliding log, no burst
  # at window boundaries.
  - key: api_key
    rate_limit:
      algorithm: sliding_log
      window: 30s
      requests_per_unit: 5

  # Search paths: two limits that must both admit, 10 per second as a token
  # bucket with room for a burst of 20, and 1000 per hour.
  - key: path
    value: "/search*"
    rate_limits:
      - algorithm: token_bucket
        unit: second
        requests_per_unit: 10
        burst: 20
      - unit: hour
        requests_per_unit: 1000

  # Health checks are never limited.
  - key: path
    value: /healthz
    rate_limit:
      unlimited: true
`

// DefaultExample returns the example configuration sluice serve loads when
// started with no --config: domain "example" with a fixed window per
// minute, a 30s sliding log, two limits on one node and an unlimited path.
func DefaultExample() []byte { return []byte(defaultExample) }
