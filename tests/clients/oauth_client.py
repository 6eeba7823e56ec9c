"""The reference Python MCP SDK's OAuth client against `mcp-fixture http --oauth`.

usage: oauth_client.py MCP_URL
Starts with no credentials: the SDK discovers, registers (DCR), authorizes (PKCE, automatic
consent: the redirect is followed here instead of in a browser), initializes, lists the
tools, calls echo, then admin_tool, which needs a step-up to the write scope. Prints one
JSON object with what it saw.
"""

import asyncio
import json
import sys
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

REDIRECT = "http://127.0.0.1:9/callback"


class MemoryStorage:
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def main(url: str) -> None:
    redirects: list[dict] = []

    async def redirect_handler(authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.get(authorization_url, follow_redirects=False)
        location = response.headers.get("location", "")
        query = {k: v[0] for k, v in parse_qs(urlparse(location).query).items()}
        query["status"] = response.status_code
        redirects.append(query)

    async def callback_handler() -> AuthorizationCodeResult:
        last = redirects[-1]
        if "code" not in last:
            raise RuntimeError(f"authorization failed: {last}")
        return AuthorizationCodeResult(code=last["code"], state=last.get("state"), iss=last.get("iss"))

    storage = MemoryStorage()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="python-sdk-oauth-test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                echo = await session.call_tool("echo", {"text": "from python"})
                admin = await session.call_tool("admin_tool", {})
                print(
                    json.dumps(
                        {
                            "tools": sorted(tool.name for tool in tools.tools),
                            "echo": text_of(echo),
                            "admin": text_of(admin),
                            "redirects": [r["status"] for r in redirects],
                            "iss": [r.get("iss") for r in redirects],
                            "final_scope": storage.tokens.scope if storage.tokens else None,
                        }
                    )
                )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
