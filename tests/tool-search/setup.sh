#!/usr/bin/env bash
# Installs the real MCP servers of the tool-search set (npm into node_modules/, PyPI into
# .venv/), pinned; about 1.3 GB, so not part of tests/setup.sh: only the measurement
# (`loadtest tool-search`) and list_tools.py start them. Idempotent.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
