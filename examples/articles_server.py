"""Example FastMCP server guarded by mcp-quota.

Run it (the quota service must be running, e.g. `make run`):

    MCP_QUOTA_URL=http://127.0.0.1:8000 MCP_QUOTA_TOKEN=dev-server-token \
        python examples/articles_server.py --port 8001

Tools: `search_articles` (readOnlyHint), `delete_tag` and `delete_tags` (destructiveHint;
the bulk one weighs one unit per tag: `costs=COSTS`).
Resource `stats://articles`: how many searches and deletions really ran, and the
quota client's counters (fail-open calls included). Reading it is not a tool call,
so it costs no quota.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from fastmcp import FastMCP
from mcp_types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))

from articles_library import Library
from mcp_quota_client import QuotaClient, QuotaConfigError
from mcp_quota_client.fastmcp import QuotaMiddleware

STATS_URI = "stats://articles"
COSTS = {"delete_tags": lambda arguments: len(arguments["tags"])}
"""What a call weighs, in units of its category's budget: one per tag it deletes."""


def build_server(
    client: QuotaClient | None = None, library: Library | None = None, name: str = "articles"
) -> FastMCP:
    """The articles server with the quota middleware installed.

    Raises:
        QuotaConfigError: no client given and MCP_QUOTA_URL or MCP_QUOTA_TOKEN unset.
    """
    lib = library if library is not None else Library()
    mcp = FastMCP(name)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True, title="Search articles"))
    def search_articles(query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Find articles whose title or tags match the query."""
        return lib.search(query, limit)

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=True, title="Delete a tag"))
    def delete_tag(tag: str) -> dict[str, Any]:
        """Delete a tag from every article. Destructive."""
        return lib.delete_tag(tag)

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=True, title="Delete tags"))
    def delete_tags(tags: list[str]) -> dict[str, Any]:
        """Delete several tags from every article at once. Destructive."""
        return lib.delete_tags(tags)

    quota = QuotaMiddleware(client, costs=COSTS)

    @mcp.resource(STATS_URI, mime_type="application/json")
    def stats() -> str:
        """What the tools really did, and the quota client's counters."""
        client_stats = quota.client.stats()
        return json.dumps(
            {
                **lib.snapshot(),
                "quota_checks": client_stats.checks,
                "quota_fail_open": client_stats.fail_open_total,
                "quota_fail_closed": sum(client_stats.fail_closed.values()),
                "quota_refused_locally": client_stats.refused_locally,
            }
        )

    @mcp.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    mcp.add_middleware(quota)
    return mcp


def close_quota(server: FastMCP) -> None:
    """Give back the unspent leased reads when the server stops (best effort; a server
    killed outright leaves them counted, the safe side)."""
    for middleware in server.middleware:
        if isinstance(middleware, QuotaMiddleware):
            anyio.run(middleware.client.aclose)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    parser.add_argument("--name", default="articles", help="the MCP server's name")
    args = parser.parse_args(argv)
    try:
        server = build_server(name=args.name)
    except QuotaConfigError as exc:
        parser.exit(2, f"{exc}\n")
    try:
        if args.transport == "stdio":
            server.run("stdio", show_banner=False)
        else:
            server.run(
                "http", show_banner=False, host=args.host, port=args.port, log_level="warning"
            )
    finally:
        close_quota(server)


if __name__ == "__main__":
    main()
