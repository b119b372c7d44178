"""`make run`: the service on http://127.0.0.1:$PORT over an embedded DynamoDB.

Without AWS_ENDPOINT_URL it starts a moto server in this process, single-threaded so
every request is serialised (moto is not atomic under concurrent requests), creates the
tables and runs `chalice local`. With AWS_ENDPOINT_URL set it uses that endpoint instead
(dynalite, DynamoDB Local, or AWS itself) and creates the tables if missing.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
_CHALICE_LOCAL = (
    "import socketserver, sys\n"
    "socketserver.StreamRequestHandler.disable_nagle_algorithm = True\n"
    "from chalice.cli import main\n"
    "sys.argv[0] = 'chalice'\n"
    "sys.exit(main())\n"
)


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_embedded_backend() -> str:
    """Start a serialised moto server on loopback; returns its endpoint URL."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    port = int(os.environ.get("QUOTA_BACKEND_PORT") or free_port())
    server = make_server(
        "127.0.0.1",
        port,
        DomainDispatcherApplication(create_backend_app),
        threaded=False,
        request_handler=MotoRequestHandler,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{port}"


def main() -> int:
    socketserver.StreamRequestHandler.disable_nagle_algorithm = True  # the moto server too
    env = os.environ
    env.setdefault("AWS_ACCESS_KEY_ID", "local")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    env.setdefault("QUOTA_STAGE", "local")
    env.setdefault("QUOTA_DEV_TOKENS", "1")
    port = int(env.get("PORT", "8000"))
    # The email's one-click links: signed with a secret of this run, pointing here.
    env.setdefault("QUOTA_LINK_SECRET", secrets.token_urlsafe(32))
    env.setdefault("QUOTA_PUBLIC_URL", f"http://127.0.0.1:{port}")
    if not env.get("AWS_ENDPOINT_URL"):
        env["AWS_ENDPOINT_URL"] = start_embedded_backend()
        backend = f"embedded moto at {env['AWS_ENDPOINT_URL']}"
    else:
        backend = env["AWS_ENDPOINT_URL"]

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from admin_cli.provision import create_tables
    from chalicelib.settings import Settings

    if not env.get("QUOTA_TOPIC_ARN"):
        try:
            topic = boto3.client("sns").create_topic(Name="mcp-quota-alerts")["TopicArn"]
            env["QUOTA_TOPIC_ARN"] = topic
        except (BotoCoreError, ClientError) as exc:  # e.g. dynalite: DynamoDB only
            print(
                f"warning: no SNS at {env['AWS_ENDPOINT_URL']} ({exc}); notifications "
                "are printed here only",
                flush=True,
            )
    settings = Settings.from_env()
    create_tables(boto3.client("dynamodb"), settings)

    url = f"http://127.0.0.1:{port}"
    print(
        f"mcp-quota (stage local) on {url}\n"
        f"  backend:      {backend}\n"
        f"  server token: {settings.dev_server_token}   (tenant {settings.dev_tenant})\n"
        f"  admin token:  {settings.dev_admin_token}\n"
        f"  idle timeout: {settings.idle_timeout_seconds}s, policy {settings.policy}\n"
        f"  alerts topic: {settings.topic_arn} (notifications are also printed here)\n"
        f"  console:      {url}/console (sign in with the admin token)\n"
        "  try:\n"
        f"    curl -s {url}/v1/check -H 'Authorization: Bearer {settings.dev_server_token}' \\\n"
        "      -H 'Content-Type: application/json' \\\n"
        '      -d \'{"session_id": "s1", "tool": "delete_tag"}\'\n',
        flush=True,
    )
    # `chalice local`, with Nagle's algorithm off: small JSON answers otherwise wait for
    # the peer's delayed ACK (about 40 ms a request on loopback).
    command = [sys.executable, "-c", _CHALICE_LOCAL, "local", "--stage", "local"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-autoreload"]
    child = subprocess.Popen(command, cwd=ROOT, env=env)

    def stop(signum: int, frame: FrameType | None) -> None:
        child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
