#!/usr/bin/env bash
# Installs, idempotently, what the tests need on a fresh Debian machine:
# curl, git, Chromium, the AWS CLI, python3 with python3-requests, python3-httpx and python3-pytest and PostgreSQL from Debian, and the Vault v1.14.0 dev server built from
# tools/vaultdev into .tools/vaultdev (rebuilt only when its module changes).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -x /usr/bin/chromium ] || need+=(chromium)      # the reviewers' page is tested in headless Chromium
command -v aws >/dev/null 2>&1 || need+=(awscli)  # the stock AWS CLI is a sandbox-side client in the tests
command -v git >/dev/null 2>&1 || need+=(git)     # git clone/push through the proxy door, to git http-backend
# Debian's Python with requests: sandbox-side clients of the proxy door tests (urllib, requests)
/usr/bin/python3 -c 'import requests' >/dev/null 2>&1 || need+=(python3 python3-requests)
# Debian's httpx and pytest: the Python SDK and its suite (the Python package registry is not used)
/usr/bin/python3 -c 'import httpx, pytest' >/dev/null 2>&1 || need+=(python3-httpx python3-pytest)
# PostgreSQL's server binaries: the tests run their own server (internal/pgtest), never the system's.
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)

# Node ≥ 20 and npm: the TypeScript SDK (its `npm ci` fetches typescript from the npm registry).
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ] || ! command -v npm >/dev/null 2>&1; then
  echo "deps: the TypeScript SDK needs Node >= 20 and npm (found node major $node_major)" >&2
  exit 1
fi

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${need[*]}; install them (apt-get install -y ${need[*]}) or run as root" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  if [[ " ${need[*]} " == *" postgresql "* ]]; then
    # Install the binaries only: no system cluster is created, so none is started.
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/airlock-no-main-cluster.conf
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The Vault dev server: a separate module, so Vault's dependencies stay out of
# the product's. The first build takes minutes; later runs reuse the binary.
stamp=$(cat tools/vaultdev/go.mod tools/vaultdev/go.sum tools/vaultdev/main.go | sha256sum | cut -d' ' -f1)
if [ ! -x .tools/vaultdev ] || [ "$(cat .tools/vaultdev.stamp 2>/dev/null)" != "$stamp" ]; then
  echo "deps: building the Vault dev server (tools/vaultdev; minutes the first time)"
  mkdir -p .tools
  (cd tools/vaultdev && go build -o ../../.tools/vaultdev .)
  echo "$stamp" > .tools/vaultdev.stamp
fi
echo "deps: ok (go $(go env GOVERSION), curl $(curl --version | head -1 | cut -d' ' -f2), $(/usr/bin/chromium --version 2>/dev/null | head -1), $(aws --version 2>&1 | cut -d' ' -f1), $(git --version), postgresql $(ls /usr/lib/postgresql | sort -V | tail -1), node $(node --version), httpx $(/usr/bin/python3 -c 'import httpx; print(httpx.__version__)'), vaultdev $(du -h .tools/vaultdev | cut -f1))"
