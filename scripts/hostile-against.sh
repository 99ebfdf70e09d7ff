#!/usr/bin/env bash
# Runs classes of the hostile-client suite (service/hostile) against the
# sluice binary of another commit, judged by this tree's tests and bounds:
# the way to see that a class fails without the code it guards.
#
#   scripts/hostile-against.sh REV [go test flags...]
#
# REV is any git revision. Its ./cmd/sluice is built in a temporary git
# worktree (with -tags hostiletest when the hook exists there; the panic
# class needs it), the worktree is removed, and this tree's suite runs
# with HOSTILE_BINARY naming the binary: flags the binary does not know are
# left out, and bounds it has no flag for are this tree's defaults. The go
# test flags default to -run TestHostileSurfaces (every surface class on
# the memory store). Exits with go test's status: a class that guards a
# change made after REV is expected to fail.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/hostile-against.sh REV [go test flags...]}
shift
GO=${GO:-go}
[ $# -gt 0 ] || set -- -run TestHostileSurfaces

commit=$(git rev-parse --verify "$rev^{commit}")
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --quiet --detach "$tmp/src" "$commit"
tags=()
if [ -f "$tmp/src/cmd/sluice/hostile_hook.go" ]; then
  tags=(-tags hostiletest)
fi
echo "building ./cmd/sluice of $(git log -1 --format='%h %s' "$commit" | cut -c1-100)"
(cd "$tmp/src" && "$GO" build "${tags[@]}" -o "$tmp/sluice" ./cmd/sluice)
git worktree remove --force "$tmp/src"
HOSTILE_BINARY="$tmp/sluice" "$GO" test -count=1 -v -timeout 30m "$@" ./service/hostile/
