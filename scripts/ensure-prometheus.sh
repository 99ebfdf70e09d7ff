#!/usr/bin/env bash
# Installs Debian's prometheus (which ships promtool) when either is missing,
# so that the deploy tests can check the alerting rules and evaluate the
# dashboard's queries against a real Prometheus. Needs root or sudo.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing prometheus with apt-get" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service on :9090; the tests never use it.
$SUDO systemctl stop prometheus >/dev/null 2>&1 || $SUDO service prometheus stop >/dev/null 2>&1 || true
