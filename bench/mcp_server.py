"""The example FastMCP articles server, with its quota middleware or without it.

    python bench/mcp_server.py --port 8101 [--no-quota]

`examples/articles_server.py` always installs the middleware (there is no switch to run it
bare), so for the baseline this builds the very same server and takes the middleware out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from articles_server import build_server  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from mcp_quota_client import QuotaClient, QuotaClientConfig  # noqa: E402
from mcp_quota_client.fastmcp import QuotaMiddleware  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--no-quota", action="store_true")
    args = parser.parse_args()
    if args.no_quota:
        unused = QuotaClient(QuotaClientConfig(base_url="http://127.0.0.1:9", token="unused"))
        server = build_server(unused)
        server.middleware = [m for m in server.middleware if not isinstance(m, QuotaMiddleware)]
    else:
        server = build_server()  # MCP_QUOTA_URL / MCP_QUOTA_TOKEN from the environment
    server.run("http", show_banner=False, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
