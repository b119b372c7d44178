"""`chalice local` as `make run` starts it: bursts, one error shape, a readable log.

The runner (`scripts/serve_local.py`) starts this file in place of the `chalice` command,
with the same arguments. Before handing over to chalice's CLI it adjusts the local
gateway emulation, never the service's routes:

- a listen backlog of `BACKLOG` instead of 5, so a burst of connections queues instead of
  being reset; each connection has its own thread, and `IN_FLIGHT` of them run the app at
  once, so a burst waits its turn instead of timing out against the backend;
- every error the emulation answers itself (401, 403, 404 for an unknown route, 405,
  415, 500 from the authorizer) gets the service's body, `{"error": {"code", "message"}}`,
  and never echoes a request header (API Gateway's emulation echoed `Authorization`);
- one line per refused check and per admin action, instead of an access log line per
  request, a Powertools metrics (EMF) line per check and botocore's INFO lines.
  `VERBOSE=1` keeps all of those as well;
- SIGINT and SIGTERM end the server quietly with status 0 (the runner says "stopped").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socketserver
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http import HTTPStatus
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

BACKLOG = 1024
"""Pending connections the kernel queues before the server accepts them."""
IN_FLIGHT = 8
"""Requests the app works on at once; the others wait for a turn, connected.

Every connection still gets its thread at once, but the embedded backend answers one
request at a time: with hundreds of requests inside the app together, the last ones wait
there longer than the service's DynamoDB read timeout (2 s) and come back as 503."""

_ERROR_CODES = {
    HTTPStatus.UNAUTHORIZED: "unauthorized",
    HTTPStatus.FORBIDDEN: "forbidden",
    HTTPStatus.NOT_FOUND: "not_found",
    HTTPStatus.METHOD_NOT_ALLOWED: "method_not_allowed",
    HTTPStatus.UNSUPPORTED_MEDIA_TYPE: "unsupported_media_type",
    HTTPStatus.INTERNAL_SERVER_ERROR: "internal_error",
}
_ADMIN_PREFIXES = ("/v1/sessions/", "/v1/grants", "/v1/principals/", "/v1/tokens", "/actions/")


def verbose(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether `VERBOSE` asks for every log line (access logs, metrics, botocore)."""
    return environ.get("VERBOSE", "").strip().lower() not in ("", "0", "false", "no")


def error_message(status: int, method: str, path: str) -> str:
    """The message of an error the gateway emulation answers itself.

    Built from the status, the method and the path only: nothing the caller sent in a
    header (a token above all) can end up in a response.
    """
    if status == HTTPStatus.UNAUTHORIZED:
        return "This route needs an 'Authorization: Bearer <token>' header."
    if status == HTTPStatus.FORBIDDEN:
        return (
            "The token is unknown or revoked, or its role may not use this route "
            "(server tokens may only call POST /v1/check)."
        )
    if status == HTTPStatus.NOT_FOUND:
        return f"There is no route {path!r}; see openapi.yaml for the routes."
    if status == HTTPStatus.METHOD_NOT_ALLOWED:
        return f"The route {path!r} does not accept {method}; see openapi.yaml."
    if status == HTTPStatus.UNSUPPORTED_MEDIA_TYPE:
        return "Send the body as JSON, with 'Content-Type: application/json'."
    return "The service failed to authorize this request; see the server's log."


def service_shaped(body: bytes | str | None) -> bool:
    """Whether a body already is the service's `{"error": {"code", "message"}}`."""
    if body is None:
        return False
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return isinstance(error, dict) and isinstance(error.get("code"), str)


def error_body(status: int, method: str, path: str) -> bytes:
    """The service-shaped body for an error the gateway emulation produced."""
    code = _ERROR_CODES.get(HTTPStatus(status), "internal_error")
    message = error_message(status, method, path)
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def _request_path(raw: str) -> str:
    return unquote(urlsplit(raw).path)[:200]


def _json(raw: bytes | str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def log_line(
    method: str, path: str, status: int, request: bytes | None, response: Any
) -> str | None:
    """The one line the default log shows for a request, or None for most requests.

    A refused check and an admin action (any POST or DELETE on the admin routes) get a
    line; everything else is visible with `VERBOSE=1`.
    """
    if method == "POST" and path == "/v1/check" and status == HTTPStatus.TOO_MANY_REQUESTS:
        body = _json(response)
        error = body.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return (
            f"refused  {body.get('tool')} in session {body.get('session_id')!r}: "
            f"{body.get('category')} {body.get('used')}/{body.get('limit')} "
            f"({code})"
        )
    if method in ("POST", "DELETE") and path.startswith(_ADMIN_PREFIXES):
        reason = _json(request).get("reason")
        why = f" reason={reason!r}" if isinstance(reason, str) else ""
        return f"admin    {method} {path} -> {status}{why}"
    return None


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def install(quiet: bool) -> None:
    """Adjust chalice local before its CLI loads the app."""
    from chalice import local

    socketserver.StreamRequestHandler.disable_nagle_algorithm = True
    local.ThreadedHTTPServer.request_queue_size = BACKLOG
    local.ThreadedHTTPServer.daemon_threads = True
    if quiet:
        # A client that hangs up mid-request is not news: no traceback in the default log.
        server_error = local.ThreadedHTTPServer.handle_error

        def handle_error(self: Any, request: Any, client_address: Any) -> None:
            if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                return
            server_error(self, request, client_address)

        local.ThreadedHTTPServer.handle_error = handle_error

    class RouteNotFound(local.LocalGatewayException):
        CODE = HTTPStatus.NOT_FOUND

    turns = threading.BoundedSemaphore(IN_FLIGHT)
    gateway_init = local.LocalGateway.__init__
    handle_request = local.LocalGateway.handle_request
    send_response = local.ChaliceRequestHandler._send_http_response

    def init(self: local.LocalGateway, app_object: Any, config: Any) -> None:
        gateway_init(self, app_object, config)
        self.mcp_routes = local.RouteMatcher(list(app_object.routes))  # type: ignore[attr-defined]

    def handle(
        self: local.LocalGateway,
        method: str,
        path: str,
        headers: dict[str, Any],
        body: bytes | None,
    ) -> dict[str, Any]:
        try:
            self.mcp_routes.match_route(path)  # type: ignore[attr-defined]
        except ValueError:
            # API Gateway's own answer here is a 403 that echoes the Authorization
            # header; locally an unknown route is a plain 404.
            raise RouteNotFound({}) from None
        with turns:
            response: dict[str, Any] = handle_request(self, method, path, headers, body)
        line = log_line(method, _request_path(path), response["statusCode"], body, response["body"])
        if line is not None:
            _emit(line)
        return response

    def send(
        self: local.ChaliceRequestHandler,
        code: int,
        headers: dict[str, Any],
        body: str | bytes | None,
    ) -> None:
        page = any(
            name.lower() == "content-type" and str(value).startswith("text/html")
            for name, value in headers.items()
        )
        # The app's own pages (the email links' 403/410) stay as they are.
        if code in _ERROR_CODES and not page and not service_shaped(body):
            body = error_body(code, self.command, _request_path(self.path))
            headers = {
                name: value
                for name, value in headers.items()
                if name.lower() not in ("content-type", "content-length", "x-amzn-errortype")
            }
            headers["Content-Type"] = "application/json"
        send_response(self, code, headers, body)

    local.LocalGateway.__init__ = init  # type: ignore[method-assign]
    local.LocalGateway.handle_request = handle  # type: ignore[method-assign]
    local.ChaliceRequestHandler._send_http_response = send  # type: ignore[method-assign]

    if quiet:
        local.ChaliceRequestHandler.log_request = _no_log
        _silence_single_metric()
        # The readable log prints refusals itself; the service's JSON lines (a refusal's
        # warning, audit events) are for VERBOSE=1.
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
        for name in ("botocore", "boto3", "urllib3"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # urllib3 warns per request once more threads than pooled connections talk to
        # the backend ("Connection pool is full, discarding connection").
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def _no_log(self: object, code: int | str = "-", size: int | str = "-") -> None:
    return


def _silence_single_metric() -> None:
    # Powertools' `single_metric` prints its EMF line even with
    # POWERTOOLS_METRICS_DISABLED=true (set by the local stage); `Metrics` honours it.
    from aws_lambda_powertools import metrics
    from aws_lambda_powertools.metrics import base

    original: Callable[..., AbstractContextManager[Any]] = base.single_metric

    @contextmanager
    def single_metric(*args: Any, **kwargs: Any) -> Iterator[Any]:
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled

        if not is_metrics_disabled():
            with original(*args, **kwargs) as metric:
                yield metric
            return
        yield base.SingleMetric(namespace=kwargs.get("namespace"))

    base.single_metric = single_metric
    metrics.single_metric = single_metric


def main() -> int:
    """Run chalice's CLI with the adjustments above; status 0 on SIGINT or SIGTERM."""
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    install(quiet=not verbose())
    from chalice.cli import main as chalice_main

    sys.argv[0] = "chalice"
    try:
        return int(chalice_main() or 0)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
