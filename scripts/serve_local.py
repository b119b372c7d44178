"""`make run`: the service on http://127.0.0.1:$PORT over an embedded DynamoDB.

Without AWS_ENDPOINT_URL it starts a moto server in this process, single-threaded so
every request is serialised (moto is not atomic under concurrent requests), creates the
tables and runs `chalice local` (through `scripts/local_gateway.py`: a deep listen
backlog, the service's error body for the gateway's own errors, a quiet log). With
AWS_ENDPOINT_URL set it uses that endpoint instead (dynalite, DynamoDB Local, or AWS
itself) and creates the tables if missing.

Unless QUOTA_OIDC_ISSUER is set, it also serves a test OpenID Connect issuer
(`scripts/local_issuer.py`, local only) that the console signs in through: a picker of
an admin, an operator and a viewer of tenant demo.

The log shows one line per refused check and per admin action, and the notifications;
`VERBOSE=1` adds every access log line, the metrics and botocore's messages. Ctrl-C (or
SIGTERM) stops it with status 0. Invalid settings or an impossible policy stop it before
anything starts: one line on stderr naming the problem, status 2.
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
sys.path.insert(0, str(ROOT / "scripts"))

from local_gateway import BACKLOG, verbose  # noqa: E402 - after the path is set


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
    from werkzeug.serving import BaseWSGIServer

    quiet = not verbose()

    class Handler(MotoRequestHandler):  # type: ignore[misc]
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            if not quiet:
                super().log_request(code, size)

    class Server(BaseWSGIServer):  # type: ignore[misc]
        # One thread serves every request in turn; the backlog holds a burst meanwhile.
        request_queue_size = BACKLOG

    port = int(os.environ.get("QUOTA_BACKEND_PORT") or free_port())
    app = DomainDispatcherApplication(create_backend_app)
    server = Server("127.0.0.1", port, app, handler=Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{port}"


def _stopped_early(signum: int, frame: FrameType | None) -> None:
    print("mcp-quota stopped.", flush=True)
    raise SystemExit(0)


def start_sign_in(env: dict[str, str] | os._Environ[str], port: int) -> str:
    """Serve the local test issuer and point the service at it, unless an issuer is
    configured already; returns how the console signs in, for the banner."""
    if env.get("QUOTA_OIDC_ISSUER"):
        return f"sign in through {env['QUOTA_OIDC_ISSUER']}, or with the admin token"
    import local_issuer

    issuer_port = int(env.get("QUOTA_ISSUER_PORT") or free_port())
    seconds = int(env.get("QUOTA_ISSUER_TOKEN_SECONDS") or 3600)
    issuer = local_issuer.start(issuer_port, f"http://127.0.0.1:{port}/console", seconds)
    env["QUOTA_OIDC_ISSUER"] = issuer.url
    env["QUOTA_OIDC_CLIENT_ID"] = local_issuer.CLIENT_ID
    return f"sign in through the local test issuer at {issuer.url}, or with the admin token"


def configuration_problem() -> str | None:
    """What makes the settings or the policy unusable, in one line; None if nothing."""
    from chalicelib.quota.errors import ConfigurationError
    from chalicelib.quota.policy import load_policy
    from chalicelib.settings import Settings

    try:
        load_policy(Settings.from_env().policy)
    except ConfigurationError as exc:
        return " ".join(str(exc).split())
    return None


def main() -> int:
    # Until the child runs, Ctrl-C ends the set-up quietly too.
    signal.signal(signal.SIGTERM, _stopped_early)
    signal.signal(signal.SIGINT, _stopped_early)
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
    sign_in = start_sign_in(env, port)
    # Before anything starts: a service that would answer every call 503 is no service.
    problem = configuration_problem()
    if problem is not None:
        print(f"mcp-quota: not started: {problem}", file=sys.stderr, flush=True)
        return 2
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
        f"  console:      {url}/console ({sign_in})\n"
        "  try:\n"
        f"    curl -s {url}/v1/check -H 'Authorization: Bearer {settings.dev_server_token}' \\\n"
        "      -H 'Content-Type: application/json' \\\n"
        '      -d \'{"session_id": "s1", "tool": "delete_tag"}\'\n',
        flush=True,
    )
    # `chalice local` through local_gateway.py; with Nagle's algorithm off there: small
    # JSON answers otherwise wait for the peer's delayed ACK (about 40 ms on loopback).
    command = [sys.executable, str(ROOT / "scripts" / "local_gateway.py"), "local"]
    command += ["--stage", "local", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--no-autoreload"]
    child = subprocess.Popen(command, cwd=ROOT, env=env)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        # Ctrl-C reaches the child too (same process group); a SIGTERM or a SIGINT sent
        # to this process alone is passed on.
        stopping.set()
        if child.poll() is None:
            child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = child.wait()
    if stopping.is_set():
        print("mcp-quota stopped.", flush=True)
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
