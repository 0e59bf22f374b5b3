#!/usr/bin/env bash
# Installs, idempotently, the system tools the tests need on a fresh Debian
# machine. Nothing is installed when everything is already there.
set -euo pipefail

need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -x /usr/bin/chromium ] || need+=(chromium)      # the reviewers' page is tested in headless Chromium

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${need[*]}; install them (apt-get install -y ${need[*]}) or run as root" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
echo "deps: ok (go $(go env GOVERSION), curl $(curl --version | head -1 | cut -d' ' -f2), $(/usr/bin/chromium --version 2>/dev/null | head -1))"
