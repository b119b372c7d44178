"""The articles example on the official `mcp` SDK (2.x `MCPServer`), guarded by mcp-quota.

    MCP_QUOTA_URL=http://127.0.0.1:8000 MCP_QUOTA_TOKEN=dev-server-token \
        python examples/articles_server_sdk.py --port 8002

Same tools and `stats://articles` resource as `articles_server.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

sys.path.insert(0, str(Path(__file__).resolve().parent))

from articles_library import Library
from mcp_quota_client import QuotaClient, QuotaConfigError
from mcp_quota_client.mcp_sdk import protect

STATS_URI = "stats://articles"
COSTS = {"delete_tags": lambda arguments: len(arguments["tags"])}


def build_server(client: QuotaClient | None = None, library: Library | None = None) -> MCPServer:
    """The articles server with the quota guard installed.

    Raises:
        QuotaConfigError: no client given and MCP_QUOTA_URL or MCP_QUOTA_TOKEN unset.
    """
    lib = library if library is not None else Library()
    server: MCPServer = MCPServer("articles-sdk")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, title="Search articles"))
    def search_articles(query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Find articles whose title or tags match the query."""
        return lib.search(query, limit)

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, title="Delete a tag"))
    def delete_tag(tag: str) -> dict[str, Any]:
        """Delete a tag from every article. Destructive."""
        return lib.delete_tag(tag)

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, title="Delete tags"))
    def delete_tags(tags: list[str]) -> dict[str, Any]:
        """Delete several tags from every article at once. Destructive."""
        return lib.delete_tags(tags)

    guard = protect(server, client, costs=COSTS)

    @server.resource(STATS_URI, mime_type="application/json")
    def stats() -> str:
        """What the tools really did, and the quota client's counters."""
        client_stats = guard.client.stats()
        return json.dumps(
            {
                **lib.snapshot(),
                "quota_checks": client_stats.checks,
                "quota_fail_open": client_stats.fail_open_total,
                "quota_fail_closed": sum(client_stats.fail_closed.values()),
                "quota_refused_locally": client_stats.refused_locally,
            }
        )

    @server.custom_route("/health", methods=["GET"])  # type: ignore[untyped-decorator]
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument(
        "--transport", choices=["streamable-http", "stdio"], default="streamable-http"
    )
    args = parser.parse_args(argv)
    try:
        server = build_server()
    except QuotaConfigError as exc:
        parser.exit(2, f"{exc}\n")
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
