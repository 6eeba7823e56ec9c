# Sourced by run.sh and client.sh: a work directory and the processes started, both gone on
# exit, and two port helpers (everything listens on 127.0.0.1 only).
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  return 1
}

# The service under test ($pool) on a free port, $pool_port, reaching loopback upstreams;
# `api METHOD PATH [BODY]` drives it as admin for user `conformance`, `json EXPR` reads
# its answers.
key=conformance-admin-key-0123456789abcdef
start_pool() {
  pool_port=$(free_port)
  (cd "$work" && MCP_POOL__SERVER__PORT=$pool_port MCP_POOL__GRPC__ENABLED=false \
    MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS=true MCP_POOL_ADMIN_KEY=$key RUST_LOG=${RUST_LOG:-warn} \
    exec "$pool" serve) >"$work/pool.log" 2>&1 &
  pids+=($!)
}
api() {
  curl -sf -X "$1" "http://127.0.0.1:$pool_port$2" -H "Authorization: Bearer $key" \
    -H "X-User-Id: conformance" -H 'Content-Type: application/json' ${3:+-d "$3"}
}
json() { python3 -c "import json,sys; print($1)"; }
# The server `$1` (a body of POST /api/mcp-servers) with every tool auto-approved, alone
# behind assistant `conformance`'s gateway (prefix "never"), reached through shim.mjs,
# which adds the gateway token the suite's CLI cannot send: sets $shim_port.
gateway_for() {
  local id tools token
  id=$(api POST /api/mcp-servers "$1" | json 'json.load(sys.stdin)["id"]')
  tools=$(api GET "/api/mcp-servers/$id/tools" | json 'json.dumps([t["name"] for t in json.load(sys.stdin)["tools"]])')
  api PUT "/api/mcp-servers/$id" "{\"autoApproveTools\":$tools}" >/dev/null
  api PUT /api/assistants/conformance/mcp-servers "{\"serverIds\":[\"$id\"]}" >/dev/null
  api PUT /api/assistants/conformance/gateway '{"prefix":"never"}' >/dev/null
  token=$(api POST /api/assistants/conformance/gateway-tokens '{"name":"conformance"}' | json 'json.load(sys.stdin)["token"]')
  shim_port=$(free_port)
  TARGET="http://127.0.0.1:$pool_port/mcp/assistants/conformance" TOKEN=$token PORT=$shim_port \
    node "$here/shim.mjs" >"$work/shim.log" 2>&1 &
  pids+=($!)
  wait_port "$shim_port"
}
