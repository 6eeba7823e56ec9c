"""The reference Python MCP SDK as a client of mcp-pool's gateway.

usage: gateway_client.py URL TOKEN
Lists the tools, calls fx__echo and every__echo, and prints one JSON object with what it saw.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def main(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                info = await session.initialize()
                tools = await session.list_tools()
                echo = await session.call_tool("fx__echo", {"text": "from python"})
                other = await session.call_tool("every__echo", {"message": "python says hi"})
                print(
                    json.dumps(
                        {
                            "server": info.server_info.name if hasattr(info, "server_info") else info.serverInfo.name,
                            "tools": sorted(tool.name for tool in tools.tools),
                            "echo": text_of(echo),
                            "other": text_of(other),
                        }
                    )
                )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
