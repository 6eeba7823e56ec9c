#!/usr/bin/env bash
# Installs what the tests talk to: the reference MCP server (npm), the reference Python
# MCP client and schemathesis (PyPI). Idempotent; nothing is downloaded while the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --prefix tests/upstreams --no-audit --no-fund
if [ ! -x tests/clients/.venv/bin/python ]; then
  python3 -m venv tests/clients/.venv
fi
tests/clients/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt
