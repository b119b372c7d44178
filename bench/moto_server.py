"""moto's DynamoDB as a server in its own process, for what dynalite cannot run (zae-limiter
needs TransactWriteItems):

    .venv/bin/python -m bench.moto_server

Serialised (one request at a time, like dynalite) and with Nagle off, as
scripts/serve_local.py runs it. Prints its port on the first line of stdout.
"""

from __future__ import annotations

import contextlib
import os
import socketserver
import sys

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from bench.latency_proxy import child_server


def main() -> int:
    socketserver.StreamRequestHandler.disable_nagle_algorithm = True
    server = make_server(
        "127.0.0.1",
        0,
        DomainDispatcherApplication(create_backend_app),
        threaded=False,
        request_handler=MotoRequestHandler,
    )
    print(server.server_address[1], flush=True)
    server.serve_forever()
    return 0


def moto_server() -> contextlib.AbstractContextManager[str]:
    """The server in a child process; yields its endpoint URL."""
    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        **os.environ,
    }
    return child_server("bench.moto_server", env=env)


if __name__ == "__main__":
    sys.exit(main())
