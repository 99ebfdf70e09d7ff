#!/usr/bin/env bash
# Installs Debian's memcached when missing, so that the tests can start
# their own servers on loopback. Needs root or sudo.
set -euo pipefail
if command -v memcached >/dev/null 2>&1 || [ -x /usr/bin/memcached ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing memcached with apt-get" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq memcached >/dev/null
# The package starts a system service on :11211; the tests never use it.
$SUDO systemctl stop memcached >/dev/null 2>&1 || $SUDO service memcached stop >/dev/null 2>&1 || true
