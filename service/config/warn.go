package config

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// LogWarnEntries is the size of a sliding log above which a rule draws a
// warning when the configuration loads. A key of a sliding_log rule keeps
// an entry per time of admission in its last period, up to the rule's
// rate: about logEntryRedis bytes each in Redis and 16 in memory, so
// 10,000 entries are about 1 MB per key in Redis. Such a rule is valid
// (the work of a decision grows only by a logarithm with its log's
// length); the warning says what its keys may cost.
const LogWarnEntries = 10_000

// logEntryRedis is the bytes of a log entry in Redis beyond a ZSET's
// listpack (docs/bounds.md), rounded up.
const logEntryRedis = 100

// Warnings returns, sorted by rule name, a line for each rule whose keys
// may each cost much memory: a sliding_log of a rate above
// LogWarnEntries.
func (c *Config) Warnings() []string {
	var out []string
	for _, r := range c.Rules() {
		if l := r.Limit; l.Algorithm == sluice.SlidingLog && l.Rate > LogWarnEntries {
			out = append(out, fmt.Sprintf("rule %s: a sliding_log of %d per %v keeps up to %d entries per key, about %s in Redis and %s in memory (sliding_window keeps two counters per key at any rate)",
				r.Name, l.Rate, l.Period, l.Rate, bytesOf(int64(l.Rate)*logEntryRedis), bytesOf(int64(l.Rate)*16)))
		}
	}
	return out
}

// bytesOf writes n bytes in KB or MB (of 1000), rounded up.
func bytesOf(n int64) string {
	if n >= 1_000_000 {
		return fmt.Sprintf("%d MB", (n+999_999)/1_000_000)
	}
	return fmt.Sprintf("%d KB", (n+999)/1000)
}
