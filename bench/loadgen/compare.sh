#!/bin/sh
# compare.sh: envoyproxy/ratelimit and sluice serve in one run, interleaved,
# on the same machine, load generator and YAML: ROUNDS rounds (default 3) of
# the reference on Redis, sluice on Redis, sluice on Redis with its local
# tier, and sluice on the memory store, each driven over gRPC at concurrency
# C for D. Prints every run, then the medians and the ratios to the
# reference's medians.
#
#   bench/loadgen/compare.sh 64 10s
#   ROUNDS=5 bench/loadgen/compare.sh 64 10s
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
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "${ROUNDS:-3}"); do
	for cfg in reference redis tiered memory ${BASE:+base-redis base-tiered base-memory}; do
		dir=$here
		case $cfg in base-*) dir=$BASE/bench/loadgen ;; esac
		case ${cfg#base-} in
		reference) set -- reference ;;
		redis) set -- redis --redis-timeout 1s ;;
		tiered) set -- redis --redis-timeout 1s --tiered --lease-max 100 ;;
		memory) set -- memory ;;
		esac
		store=$1; shift
		line=$(MODES=grpc sh "$dir/run.sh" "$store" "$c" "$d" "$@" | grep '^throughput=')
		echo "round $r $cfg $line"
		echo "$cfg $line" >>"$out"
	done
done
echo
echo "# medians over ${ROUNDS:-3} rounds, c=$c d=$d, $(nproc) CPUs"
awk -v base="${BASE:+1}" '
function ms(v) { # a Go duration: 1.5ms, 870µs, 1.2s
	if (v ~ /µs$/) return substr(v, 1, length(v)-2) / 1000
	if (v ~ /ms$/) return substr(v, 1, length(v)-2) + 0
	if (v ~ /s$/) return substr(v, 1, length(v)-1) * 1000
	return v + 0
}
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
{
	cfg = $1; n[cfg]++
	for (i = 2; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[1] == "throughput") tp[cfg, n[cfg]] = kv[2]
		if (kv[1] == "p99") p99[cfg, n[cfg]] = ms(kv[2])
	}
}
END {
	m = split("reference redis tiered memory" (base ? " base-redis base-tiered base-memory" : ""), order, " ")
	for (k = 1; k <= m; k++) {
		cfg = order[k]
		for (i = 1; i <= n[cfg]; i++) { a[i] = tp[cfg, i]; b[i] = p99[cfg, i] }
		mt[cfg] = median(a, n[cfg]); mp[cfg] = median(b, n[cfg])
	}
	printf "%-12s %12s %10s %18s %14s\n", "config", "calls/s", "p99 ms", "calls/s / ref", "p99 / ref"
	for (k = 1; k <= m; k++) {
		cfg = order[k]
		printf "%-12s %12.0f %10.2f %17.2fx %13.2fx\n", cfg, mt[cfg], mp[cfg], mt[cfg]/mt["reference"], mp[cfg]/mp["reference"]
	}
	if (base) {
		printf "\n%-12s %18s %14s\n", "config", "calls/s / base", "p99 / base"
		for (k = 2; k <= 4; k++) {
			cfg = order[k]
			printf "%-12s %17.3fx %13.3fx\n", cfg, mt[cfg]/mt["base-" cfg], mp[cfg]/mp["base-" cfg]
		}
	}
}' "$out"
