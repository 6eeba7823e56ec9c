"""List the tools of every server in servers.json and write tools.json.

usage: tests/clients/.venv/bin/python tests/tool-search/list_tools.py [--only NAME ...] [--out FILE] [--servers FILE]

Each server is started over stdio with the reference Python MCP SDK, from the packages
installed in this folder (npm: node_modules/, PyPI: .venv/), with cwd tests/tool-search
and only the dummy env of its entry (on top of the SDK's minimal default environment).
All its tools are listed, following pagination, within 20 s per server. A server that
fails or times out is reported and makes the script exit 1; tools.json is then not written
(unless --only was given, which writes only the named servers to --out).
Servers' stderr goes to logs/<name>.log (untracked).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 20


def field(obj, *names):
    """A field of an SDK model under its 2.x (snake_case) or 1.x (camelCase) name."""
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def params_cls():
    import mcp.types as types

    return types.PaginatedRequestParams


async def list_server(entry: dict) -> list[dict]:
    command = entry["command"]
    if "/" in command:
        command = str((HERE / command).resolve())
    params = StdioServerParameters(
        command=command,
        args=entry.get("args", []),
        env=entry.get("env") or None,
        cwd=str(HERE),
    )
    logs = HERE / "logs"
    logs.mkdir(exist_ok=True)
    tools: list[dict] = []
    with open(logs / f"{entry['name']}.log", "w") as errlog:
        with anyio.fail_after(TIMEOUT_S):
            async with stdio_client(params, errlog=errlog) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    cursor = None
                    pages = 0
                    while True:
                        req = params_cls()(cursor=cursor) if cursor else None
                        result = await session.list_tools(params=req)
                        pages += 1
                        for tool in result.tools:
                            tools.append(
                                {
                                    "name": tool.name,
                                    "title": field(tool, "title"),
                                    "description": field(tool, "description"),
                                    "inputSchema": field(tool, "input_schema", "inputSchema"),
                                }
                            )
                        cursor = field(result, "next_cursor", "nextCursor")
                        if not cursor or pages > 100:
                            break
    return tools


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None, help="list only these servers")
    ap.add_argument("--out", default=None, help="output file (default tools.json)")
    ap.add_argument("--servers", default=str(HERE / "servers.json"), help="server list (default servers.json)")
    args = ap.parse_args()

    servers = json.loads(Path(args.servers).read_text())
    if args.only:
        unknown = set(args.only) - {s["name"] for s in servers}
        if unknown:
            print(f"unknown servers: {sorted(unknown)}", file=sys.stderr)
            return 2
        servers = [s for s in servers if s["name"] in args.only]

    out, failed, total = [], [], 0
    for entry in servers:
        started = time.monotonic()
        try:
            tools = await list_server(entry)
        except BaseException as exc:  # noqa: BLE001 - report and go on with the next server
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            failed.append(entry["name"])
            detail = repr(exc)
            if hasattr(exc, "exceptions"):
                detail = "; ".join(repr(e) for e in exc.exceptions)
            print(f"FAIL {entry['name']:<20} {detail[:300]} (see logs/{entry['name']}.log)")
            continue
        names = [t["name"] for t in tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            print(f"WARN {entry['name']}: duplicate tool names {dupes}")
        total += len(tools)
        out.append({"name": entry["name"], "package": entry["package"], "tools": tools})
        print(f"ok   {entry['name']:<20} {len(tools):>4} tools  {time.monotonic() - started:5.1f}s")

    print(f"total: {total} tools over {len(out)} servers; failed: {failed or 'none'}")
    if failed and not args.only:
        return 1
    target = Path(args.out) if args.out else HERE / "tools.json"
    target.write_text(json.dumps({"servers": out}, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
