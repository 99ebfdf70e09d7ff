#!/usr/bin/env bash
# Runs the Redis-backed tests a second time, on Valkey: exactly the
# top-level tests that started a server (internal/testserver/redistest) in
# the run that wrote the list RECORD (REDISTEST_RECORD=RECORD go test ...),
# with the same flags, and REDISTEST_SERVER set to valkey-server.
#
#   scripts/valkey-tests.sh RECORD [go test flags...]
#
# valkey-server is VALKEY_SERVER when set, else ../shared/valkey/valkey-server
# (from the repository root), else valkey-server in PATH. Without one, it
# says so in one line and succeeds: Valkey is an extra, not a requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
record=$1
shift
GO=${GO:-go}

server=${VALKEY_SERVER:-}
if [ -z "$server" ]; then
  for c in ../shared/valkey/valkey-server "$(command -v valkey-server 2>/dev/null || true)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then
      server=$c
      break
    fi
  done
fi
if [ -z "$server" ]; then
  echo "valkey: skipped, no valkey-server (../shared/valkey/, PATH or VALKEY_SERVER): the Redis-backed tests ran on Redis only"
  exit 0
fi
if [ ! -x "$server" ]; then
  echo "valkey: VALKEY_SERVER=$server is not an executable" >&2
  exit 1
fi
server=$(cd "$(dirname "$server")" && pwd)/$(basename "$server")
version=$("$server" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
if [ ! -s "$record" ]; then
  echo "valkey: no Redis-backed test ran (empty $record)"
  exit 0
fi

root=$(pwd)
# run MODULE_DIR: the recorded tests of the packages under MODULE_DIR
# (bench is a module of its own, left out of the root's).
run() {
  local mod=$1 pkgs tests
  shift
  pkgs=$(awk -F'\t' -v root="$root" -v mod="$mod" '
    { dir = $1 }
    mod == root && (dir == root "/bench" || index(dir, root "/bench/") == 1) { next }
    dir == mod { print "."; next }
    index(dir, mod "/") == 1 { print "./" substr(dir, length(mod) + 2) }
  ' "$record" | sort -u)
  [ -n "$pkgs" ] || return 0
  tests=$(awk -F'\t' -v root="$root" -v mod="$mod" '
    mod == root && ($1 == root "/bench" || index($1, root "/bench/") == 1) { next }
    $1 == mod || index($1, mod "/") == 1 { print $2 }
  ' "$record" | sort -u | paste -sd'|')
  echo "valkey: $(echo "$tests" | tr '|' '\n' | wc -l) Redis-backed tests of $(echo "$pkgs" | wc -l) packages$([ "$mod" = "$root" ] || echo " in ${mod#"$root"/}/") again, on Valkey $version ($server)"
  (cd "$mod" && REDISTEST_SERVER="$server" $GO test "$@" -run "^($tests)\$" $pkgs)
}
run "$root" "$@"
run "$root/bench" "$@"
