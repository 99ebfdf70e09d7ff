#!/bin/sh
# run.sh: build sluice and loadgen, start sluice serve on loopback (memory
# store, or a throw-away redis-server), and drive ShouldRateLimit (gRPC) and
# /v1/check (HTTP) at concurrency C for D.
#
#   bench/loadgen/run.sh memory 64 10s
#   bench/loadgen/run.sh redis 64 10s
#   bench/loadgen/run.sh redis 64 10s --tiered --lease-max 100
#   bench/loadgen/run.sh reference 64 10s
#   bench/loadgen/run.sh floor 64 10s -workers 128
#
# "reference" runs envoyproxy/ratelimit itself (built from the Go module
# proxy at $REFERENCE_VERSION) on a throw-away redis-server with the same
# configuration, so that sluice can be compared with it in one run (see
# compare.sh); it has no /v1/check, so only gRPC is driven. "floor" runs
# bench/loadgen/floor, a gRPC server that answers every call with OK at
# once: what the transport alone costs (extra arguments go to it).
#
# The generator reports the CPU time of the service, of its redis-server
# and of itself apart (-pids), and the service's allocations per call
# (-metrics, sluice and floor only).
# MODES="grpc" drives gRPC only (default "grpc http"); LOADGEN_ARGS go to
# the generator (for example "-grpc-timeout 20ms", as Envoy sends). Extra arguments go
# to sluice serve (for reference: VAR=value settings of its environment). Everything listens on 127.0.0.1 only.
set -eu
measured=""
store=${1:-memory}; c=${2:-64}; d=${3:-10s}
shift 3 2>/dev/null || shift $#
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

(cd "$root/bench" && go build -o "$tmp/loadgen" ./loadgen)
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
startredis() {
	port=$(freeport)
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
	pids="$pids $!"
	measured="redis=$!"
	until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
}

if [ "$store" = reference ]; then
	# envoyproxy/ratelimit with its defaults (no pipelining, pool of 10,
	# no local cache, statsd off), on the same YAML as sluice.
	ver=${REFERENCE_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
	GOBIN="$tmp" go install "github.com/envoyproxy/ratelimit/src/service_cmd@$ver"
	startredis
	mkdir -p "$tmp/rt/ratelimit/config"
	cp "$here/bench.yaml" "$tmp/rt/ratelimit/config/"
	hport=$(freeport); gport=$(freeport); dport=$(freeport)
	env HOST=127.0.0.1 PORT="$hport" GRPC_HOST=127.0.0.1 GRPC_PORT="$gport" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dport" USE_STATSD=false LOG_LEVEL=warn \
		RUNTIME_ROOT="$tmp/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$port" "$@" \
		"$tmp/service_cmd" >"$tmp/reference.log" 2>&1 &
	pids="$pids $!"
	measured="service=$!,$measured"
	until curl -sf "http://127.0.0.1:$hport/healthcheck" >/dev/null 2>&1; do sleep 0.05; done
	echo "# store=reference ($ver) c=$c d=$d, $(nproc) CPUs${*:+, env $*}"
	echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	"$tmp/loadgen" ${LOADGEN_ARGS:-} -mode grpc -addr "127.0.0.1:$gport" -c "$c" -d "$d" -pids "$measured"
	exit 0
fi

if [ "$store" = floor ]; then
	(cd "$root/bench" && go build -o "$tmp/floor" ./loadgen/floor)
	"$tmp/floor" -grpc 127.0.0.1:0 -http 127.0.0.1:0 -ready-file "$tmp/ready" "$@" 2>"$tmp/floor.log" &
	pids="$pids $!"
	measured="service=$!"
	until [ -s "$tmp/ready" ]; do sleep 0.05; done
	grpc=$(sed 's/.*"grpc":"\([^"]*\)".*/\1/' "$tmp/ready")
	http=$(sed 's/.*"http":"\([^"]*\)".*/\1/' "$tmp/ready")
	echo "# store=floor c=$c d=$d, $(nproc) CPUs, floor $*"
	echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	"$tmp/loadgen" ${LOADGEN_ARGS:-} -mode grpc -addr "$grpc" -c "$c" -d "$d" -pids "$measured" -metrics "http://$http/metrics"
	exit 0
fi

(cd "$root" && go build -o "$tmp/sluice" ./cmd/sluice)

set -- --config "$here/bench.yaml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --ready-file "$tmp/ready" --log-level warn "$@"
if [ "$store" = redis ]; then
	startredis
	set -- "$@" --redis "redis://127.0.0.1:$port"
fi
"$tmp/sluice" serve "$@" 2>"$tmp/sluice.log" &
pids="$pids $!"
measured="service=$!${measured:+,$measured}"
until [ -s "$tmp/ready" ]; do sleep 0.05; done
grpc=$(sed 's/.*"grpc":"\([^"]*\)".*/\1/' "$tmp/ready")
http=$(sed 's/.*"http":"\([^"]*\)".*/\1/' "$tmp/ready")
echo "# store=$store c=$c d=$d, $(nproc) CPUs, sluice serve $*"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in ${MODES:-grpc http}; do
	case $m in
	grpc) "$tmp/loadgen" ${LOADGEN_ARGS:-} -mode grpc -addr "$grpc" -c "$c" -d "$d" -pids "$measured" -metrics "http://$http/metrics" ;;
	http) "$tmp/loadgen" ${LOADGEN_ARGS:-} -mode http -addr "$http" -c "$c" -d "$d" -pids "$measured" -metrics "http://$http/metrics" ;;
	esac
done
