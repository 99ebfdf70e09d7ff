package redis

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// benchLine matches one result line of BenchmarkDecisions.
var benchLine = regexp.MustCompile(`^BenchmarkDecisions/impl=(\S+)/keys=(\d+)/c=(\d+)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench returns, per "impl/keys=K/c=C", per unit, every value seen
// (one per -count).
func parseBench(t *testing.T, path string) map[string]map[string][]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := fmt.Sprintf("%s/keys=%s/c=%s", m[1], m[2], m[3])
		if out[name] == nil {
			out[name] = map[string][]float64{}
		}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			out[name][f[i+1]] = append(out[name][f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestRatios prints the throughput and latency targets as ratios of
// medians from a saved run, and fails on a missed target.
func TestRatios(t *testing.T) {
	path := os.Getenv("SLUICE_BENCH_FILE")
	if path == "" {
		t.Skip("set SLUICE_BENCH_FILE to a saved BenchmarkDecisions output")
	}
	res := parseBench(t, path)
	get := func(name, unit string) float64 {
		v := median(res[name][unit])
		if v == 0 {
			t.Errorf("no %s for %s in %s", unit, name, path)
		}
		return v
	}
	const c64 = "/keys=10000/c=64"
	var b strings.Builder
	check := func(what string, got, want float64, atMost bool) {
		ok := got >= want
		if atMost {
			ok = got <= want
		}
		verdict := "ok"
		if !ok {
			verdict = "MISSED"
			t.Errorf("%s: %.3f, target %s %.2f", what, got, map[bool]string{true: "<=", false: ">="}[atMost], want)
		}
		fmt.Fprintf(&b, "%-62s %8.3f  (target %s %.2f) %s\n", what, got, map[bool]string{true: "<=", false: ">="}[atMost], want, verdict)
	}
	// Not a target: how far sluice's GCRA is from the least a Redis-time
	// GCRA script can do, in throughput and in server time per decision.
	fmt.Fprintf(&b, "%-62s %8.3f  (info)\n", "sluice-rueidis-gcra / floor-gcra decisions/s (c=64, 10k keys)",
		get("sluice-rueidis-gcra"+c64, "decisions/s")/get("floor-gcra"+c64, "decisions/s"))
	fmt.Fprintf(&b, "%-62s %8.3f  (info)\n", "sluice-rueidis-gcra / floor-gcra redis-µs/op (c=64, 10k keys)",
		get("sluice-rueidis-gcra"+c64, "redis-µs/op")/get("floor-gcra"+c64, "redis-µs/op"))
	for _, client := range []string{"rueidis", "goredis"} {
		for _, alg := range []string{"gcra", "fixed_window"} {
			name := "sluice-" + client + "-" + alg + c64
			d := get(name, "decisions/s")
			check(fmt.Sprintf("%s / redis_rate (c=64, 10k keys)", "sluice-"+client+"-"+alg), d/get("redis_rate"+c64, "decisions/s"), 3, false)
			check(fmt.Sprintf("%s / evalsha-incr (c=64, 10k keys)", "sluice-"+client+"-"+alg), d/get("evalsha-incr"+c64, "decisions/s"), 0.85, false)
		}
		for _, keys := range []string{"10000", "1"} {
			name := "sluice-" + client + "-sliding_log/keys=" + keys + "/c=64"
			check(fmt.Sprintf("sluice-%s-sliding_log / python-zset (c=64, keys=%s)", client, keys),
				get(name, "decisions/s")/get("python-zset/keys="+keys+"/c=64", "decisions/s"), 2, false)
		}
		for _, alg := range algorithms {
			name := "sluice-" + client + "-" + alg.String() + c64
			check(fmt.Sprintf("%s p99 ms (c=64, 10k keys)", "sluice-"+client+"-"+alg.String()), get(name, "p99-µs")/1000, 0.6, true)
		}
	}
	t.Log("\n" + b.String())

	// The whole table of medians, for the report.
	var names []string
	for n := range res {
		names = append(names, n)
	}
	slices.Sort(names)
	var tb strings.Builder
	fmt.Fprintf(&tb, "%-48s %12s %9s %9s %11s %7s\n", "benchmark (medians)", "decisions/s", "p50-µs", "p99-µs", "redis-µs/op", "allocs")
	for _, n := range names {
		fmt.Fprintf(&tb, "%-48s %12.0f %9.1f %9.1f %11.2f %7.0f\n", n,
			median(res[n]["decisions/s"]), median(res[n]["p50-µs"]), median(res[n]["p99-µs"]),
			median(res[n]["redis-µs/op"]), median(res[n]["allocs/op"]))
	}
	t.Log("\n" + tb.String())
}
