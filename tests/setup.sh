#!/usr/bin/env bash
# Installs what the tests talk to: the reference MCP servers, the conformance suite and
# playwright-core for the console's browser tests (npm), the reference Python MCP client and
# schemathesis (PyPI), and Debian's chromium (apt, when missing). Idempotent; nothing is
# downloaded while the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --prefix tests/upstreams --no-audit --no-fund
# The official MCP conformance suite, Node 22 for it, and its everything-server.
npm ci --prefix tests/conformance --no-audit --no-fund
npm ci --prefix tests/conformance/everything-server --no-audit --no-fund
# The console's browser tests (tests/console): playwright-core driving Debian's chromium.
npm ci --prefix tests/console --no-audit --no-fund
if ! command -v chromium >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
fi
if [ ! -x tests/clients/.venv/bin/python ]; then
  python3 -m venv tests/clients/.venv
fi
tests/clients/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt
