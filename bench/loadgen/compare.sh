#!/bin/sh
# compare.sh: envoyproxy/ratelimit and sluice serve in one run, interleaved,
# on the same machine, load generator and YAML: ROUNDS rounds (default 3) of
# each configuration, each driven over gRPC at concurrency C for D. Prints
# every run, then the medians and the ratios to the reference's medians.
#
#   bench/loadgen/compare.sh 64 10s
#   ROUNDS=5 bench/loadgen/compare.sh 64 10s
#
# The configurations (CONFIGS, in this order by default):
#
#   reference  envoyproxy/ratelimit on its own redis-server
#   redis      sluice serve --redis
#   tiered     sluice serve --redis --tiered --lease-max 100
#   memory     sluice serve on the memory store
#   floor      bench/loadgen/floor: grpc-go answering OK at once, no
#              decision at all (the transport's own cost)
#
# A configuration may carry extra arguments after a colon, commas for
# spaces: CONFIGS="reference memory memory:--grpc-workers=4
# floor floor:-shared-write-buffer" measures each variant in the same
# rounds.
#
# The figure that judges a change is the service's CPU per call (svc µs):
# the CPU time the service process used over the window, from /proc,
# divided by the calls it answered. calls/s and p99 depend on what else
# runs on the machine's CPUs; the CPU a call costs much less.
#
# BASE=DIR adds the three sluice configurations built from another checkout
# of sluice (say, a git worktree of the commit before a change), interleaved
# with the others in every round, and prints each configuration's ratios to
# its base as well:
#
#   git worktree add /tmp/base HEAD~3 && BASE=/tmp/base bench/loadgen/compare.sh 64 10s
#
# Everything listens on 127.0.0.1 only.
set -eu
c=${1:-64}; d=${2:-10s}
here=$(cd "$(dirname "$0")" && pwd)
configs=${CONFIGS:-reference redis tiered memory floor}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "${ROUNDS:-3}"); do
	for cfg in $configs ${BASE:+base-redis base-tiered base-memory}; do
		dir=$here
		case $cfg in base-*) dir=$BASE/bench/loadgen ;; esac
		name=${cfg%%:*}
		extra=""
		case $cfg in *:*) extra=$(echo "${cfg#*:}" | tr ',' ' ') ;; esac
		case ${name#base-} in
		reference) set -- reference ;;
		redis) set -- redis --redis-timeout 1s ;;
		tiered) set -- redis --redis-timeout 1s --tiered --lease-max 100 ;;
		memory) set -- memory ;;
		floor) set -- floor ;;
		*) echo "compare.sh: unknown configuration $name" >&2; exit 2 ;;
		esac
		store=$1; shift
		# shellcheck disable=SC2086 # extra is split on purpose
		line=$(MODES=grpc sh "$dir/run.sh" "$store" "$c" "$d" "$@" $extra |
			grep -E '^(throughput=|cpu_us_per_call |calls_per_cpu_second |allocs_per_call |reads_writes_per_call |context_switches_per_call )' | tr '\n' ' ')
		echo "round $r $cfg $line"
		echo "$cfg $line" >>"$out"
	done
done
echo
echo "# medians over ${ROUNDS:-3} rounds, c=$c d=$d, $(nproc) CPUs"
echo "# svc µs: the service process's CPU per call; svc/CPU-s: its calls per CPU-second; r+w: its read and write"
echo "# system calls per call; ctxsw: its threads' context switches per call; redis µs: its redis-server's CPU per call"
awk -v base="${BASE:+1}" -v configs="$configs" '
function ms(v) { # a Go duration: 1.5ms, 870µs, 1.2s
	if (v ~ /µs$/) return substr(v, 1, length(v)-2) / 1000
	if (v ~ /ms$/) return substr(v, 1, length(v)-2) + 0
	if (v ~ /s$/) return substr(v, 1, length(v)-1) * 1000
	return v + 0
}
function median(a, n,    i, j, t) {
	if (n == 0) return 0
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function med(key, cfg,    i, a, k) {
	k = 0
	for (i = 1; i <= n[cfg]; i++) if ((key, cfg, i) in v) a[++k] = v[key, cfg, i]
	return median(a, k)
}
function ratio(x, y) { return y > 0 ? sprintf("%.2fx", x / y) : "-" }
{
	cfg = $1; i = ++n[cfg]; mode = ""
	for (f = 2; f <= NF; f++) {
		if ($f ~ /_per_call$|^calls_per_cpu_second$/) { mode = $f; continue }
		split($f, kv, "=")
		if (kv[1] == "throughput") v["tp", cfg, i] = kv[2]
		else if (kv[1] == "p99") v["p99", cfg, i] = ms(kv[2])
		else if (mode == "cpu_us_per_call") v["us_" kv[1], cfg, i] = kv[2]
		else if (mode == "calls_per_cpu_second" && kv[1] == "service") v["cps", cfg, i] = kv[2]
		else if (mode == "allocs_per_call" && kv[1] == "service") v["allocs", cfg, i] = kv[2]
		else if (mode == "reads_writes_per_call" && kv[1] == "service") { split(kv[2], rw, "/"); v["sys", cfg, i] = rw[1] + rw[2] }
		else if (mode == "context_switches_per_call" && kv[1] == "service") v["cs", cfg, i] = kv[2]
	}
}
END {
	m = split(configs (base ? " base-redis base-tiered base-memory" : ""), order, " ")
	for (k = 1; k <= m; k++) {
		cfg = order[k]
		tp[cfg] = med("tp", cfg); p99[cfg] = med("p99", cfg); us[cfg] = med("us_service", cfg)
		cps[cfg] = med("cps", cfg); al[cfg] = med("allocs", cfg); rus[cfg] = med("us_redis", cfg)
		sys[cfg] = med("sys", cfg); cs[cfg] = med("cs", cfg)
	}
	ref = "reference"
	# (the widths of the names with a µ count its two bytes)
	printf "%-34s %9s %7s %8s %10s %8s %8s %8s %9s %9s %9s %11s\n", "config", "calls/s", "p99 ms", "svc µs", "svc/CPU-s", "allocs", "r+w", "ctxsw", "redis µs", "calls/ref", "p99/ref", "svc µs/ref"
	for (k = 1; k <= m; k++) {
		cfg = order[k]
		printf "%-34s %9.0f %7.2f %7.2f %10.0f %8s %8s %8s %8s %9s %9s %10s\n", cfg, tp[cfg], p99[cfg], us[cfg], cps[cfg],
			(al[cfg] > 0 ? sprintf("%.1f", al[cfg]) : "-"), (sys[cfg] > 0 ? sprintf("%.3f", sys[cfg]) : "-"),
			(cs[cfg] > 0 ? sprintf("%.3f", cs[cfg]) : "-"), (rus[cfg] > 0 ? sprintf("%.2f", rus[cfg]) : "-"),
			ratio(tp[cfg], tp[ref]), ratio(p99[cfg], p99[ref]), ratio(us[cfg], us[ref])
	}
	if (base) {
		printf "\n%-12s %15s %11s %15s\n", "config", "calls/s / base", "p99 / base", "svc µs / base"
		split("redis tiered memory", b, " ")
		for (k = 1; k <= 3; k++) {
			cfg = b[k]
			if (!(cfg in tp) || tp[cfg] == 0) continue # not among CONFIGS
			printf "%-12s %15s %11s %14s\n", cfg, ratio(tp[cfg], tp["base-" cfg]), ratio(p99[cfg], p99["base-" cfg]), ratio(us[cfg], us["base-" cfg])
		}
	}
}' "$out"
