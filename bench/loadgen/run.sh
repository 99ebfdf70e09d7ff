#!/bin/sh
# run.sh: build sluice and loadgen, start sluice serve on loopback (memory
# store, or a throw-away redis-server), and drive ShouldRateLimit (gRPC) and
# /v1/check (HTTP) at concurrency C for D.
#
#   bench/loadgen/run.sh memory 64 10s
#   bench/loadgen/run.sh redis 64 10s
#   bench/loadgen/run.sh redis 64 10s --tiered --lease-max 100
#
# Extra arguments go to sluice serve. Everything listens on 127.0.0.1 only.
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

(cd "$root" && go build -o "$tmp/sluice" ./cmd/sluice)
(cd "$root/bench" && go build -o "$tmp/loadgen" ./loadgen)

set -- --config "$here/bench.yaml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --ready-file "$tmp/ready" --log-level warn "$@"
if [ "$store" = redis ]; then
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
	pids="$pids $!"
	measured="$!"
	until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
	set -- "$@" --redis "redis://127.0.0.1:$port"
fi
"$tmp/sluice" serve "$@" 2>"$tmp/sluice.log" &
pids="$pids $!"
measured="$!${measured:+,$measured}"
until [ -s "$tmp/ready" ]; do sleep 0.05; done
grpc=$(sed 's/.*"grpc":"\([^"]*\)".*/\1/' "$tmp/ready")
http=$(sed 's/.*"http":"\([^"]*\)".*/\1/' "$tmp/ready")
echo "# store=$store c=$c d=$d, $(nproc) CPUs, sluice serve $*"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/loadgen" -mode grpc -addr "$grpc" -c "$c" -d "$d" -pids "$measured"
"$tmp/loadgen" -mode http -addr "$http" -c "$c" -d "$d" -pids "$measured"
