#!/usr/bin/env bash
# Installs Debian's nginx when missing, so that the examples/nginx test can
# start its own nginx on loopback. Needs root or sudo.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing nginx with apt-get" >&2
$SUDO apt-get update -qq
# Debian's and Ubuntu's nginx package has the auth_request module.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nginx >/dev/null
# The package starts a system service on :80; the tests never use it.
$SUDO systemctl stop nginx >/dev/null 2>&1 || $SUDO service nginx stop >/dev/null 2>&1 || true
