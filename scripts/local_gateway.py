"""`chalice local` as `make run` starts it: bursts, one error shape, a readable log.

The runner (`scripts/serve_local.py`) starts this file in place of the `chalice` command,
with the same arguments. Before handing over to chalice's CLI it adjusts the local
gateway emulation, never the service's routes:

- a listen backlog of `BACKLOG` instead of 5, so a burst of connections queues instead of
  being reset; each connection has its own thread, and `IN_FLIGHT` of them run the app at
  once, so a burst waits its turn instead of timing out against the backend;
- every error the emulation answers itself (401, 403, 404 for an unknown route, 405,
  415, 500 from the authorizer, and http.server's own: a request line it cannot parse)
  gets the service's body, `{"error": {"code", "message"}}`, and never echoes a request
  header (API Gateway's emulation echoed `Authorization`);
- any method at all reaches the gateway (http.server answered one it had no `do_` for
  with an HTML 501): a method the route lacks is a 405 naming the route's methods in
  `Allow`, and one no route of the service has is a 405 on any path;
- one line per refused check and per admin action (`local_log.py`), instead of an
  access log line per request, a Powertools metrics (EMF) line per check and botocore's
  INFO lines.
  `VERBOSE=1` keeps all of those as well. Control characters in a line (a client's
  percent-decoded CR/LF above all) are escaped, so no request can write a line of its own;
- HTTP/1.1 kept in step on a kept-alive connection: HEAD answers carry headers only, a
  chunked body is read, a body that cannot be read (a bad `Content-Length`, over
  `MAX_BODY_BYTES`) answers 400/413 and closes, and a fault inside the emulation answers
  500 instead of dropping the connection;
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

from local_log import emit, log_line

from chalicelib.auth.roles import SERVER_ONLY

BACKLOG = 1024
"""Pending connections the kernel queues before the server accepts them."""
IN_FLIGHT = 8
"""Requests the app works on at once; the others wait for a turn, connected.

Every connection still gets its thread at once, but the embedded backend answers one
request at a time: with hundreds of requests inside the app together, the last ones wait
there longer than the service's DynamoDB read timeout (2 s) and come back as 503."""

MAX_BODY_BYTES = 10 * 1024 * 1024
"""API Gateway's payload limit: a larger body is refused unread, and the connection closed."""

_ERROR_CODES = {
    HTTPStatus.BAD_REQUEST: "bad_request",
    HTTPStatus.UNAUTHORIZED: "unauthorized",
    HTTPStatus.FORBIDDEN: "forbidden",
    HTTPStatus.NOT_FOUND: "not_found",
    HTTPStatus.METHOD_NOT_ALLOWED: "method_not_allowed",
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: "payload_too_large",
    HTTPStatus.UNSUPPORTED_MEDIA_TYPE: "unsupported_media_type",
    HTTPStatus.INTERNAL_SERVER_ERROR: "internal_error",
}
NO_METHOD = "No route of this service accepts this method; see openapi.yaml."


def verbose(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether `VERBOSE` asks for every log line (access logs, metrics, botocore)."""
    return environ.get("VERBOSE", "").strip().lower() not in ("", "0", "false", "no")


class BadBody(Exception):
    """A request body the emulation cannot read; the connection is closed after the answer."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_message(
    status: int,
    method: str,
    path: str,
    sent_type: str | None = None,
    accepted: tuple[str, ...] = ("application/json",),
) -> str:
    """The message of an error the gateway emulation answers itself.

    Built from the status, the method, the path and, for a 415, the media type's name
    (cut to its `type/subtype`): nothing else the caller sent in a header (a token above
    all) can end up in a response.
    """
    if status == HTTPStatus.UNAUTHORIZED:
        return "This route needs an 'Authorization: Bearer <token>' header."
    if status == HTTPStatus.FORBIDDEN:
        return f"The token is unknown or revoked, or its role may not use this route. {SERVER_ONLY}"
    if status == HTTPStatus.NOT_FOUND:
        return f"There is no route {path!r}; see openapi.yaml for the routes."
    if status == HTTPStatus.METHOD_NOT_ALLOWED:
        return f"The route {path!r} does not accept {method}; see openapi.yaml."
    if status == HTTPStatus.UNSUPPORTED_MEDIA_TYPE:
        sent = media_type(sent_type)
        what = f"'Content-Type: {sent}'" if sent else "no Content-Type"
        return (
            f"{method} {path!r} takes a body of type {' or '.join(accepted)}; "
            f"the request sent {what}."
        )
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


def media_type(header: str | None) -> str | None:
    """The `type/subtype` of a Content-Type header, lower-cased; None if it is not one."""
    if header is None:
        return None
    name = header.split(";", 1)[0].strip().lower()
    kind, slash, sub = name.partition("/")
    printable = all(c.isalnum() or c in "!#$&-^_.+" for c in kind + sub)
    return name[:80] if slash and kind and sub and printable else None


def error_body(
    status: int,
    method: str,
    path: str,
    sent_type: str | None = None,
    accepted: tuple[str, ...] = ("application/json",),
) -> bytes:
    """The service-shaped body for an error the gateway emulation produced."""
    code = _ERROR_CODES.get(HTTPStatus(status), "internal_error")
    message = error_message(status, method, path, sent_type, accepted)
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def _fault_body(status: HTTPStatus, message: str) -> bytes:
    code = _ERROR_CODES.get(status, "bad_request" if status < 500 else "internal_error")
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def read_body(headers: Any, rfile: Any) -> bytes | None:
    """The request's body, read whole so the next request on the connection starts clean.

    Raises:
        BadBody: a `Content-Length` that is not a number, a body over `MAX_BODY_BYTES`,
            or a chunked body that does not parse.
    """
    if "chunked" in str(headers.get("transfer-encoding", "")).lower():
        return _read_chunked(rfile)
    raw = str(headers.get("content-length", "0")).strip() or "0"
    if not raw.isdigit():
        raise BadBody(HTTPStatus.BAD_REQUEST, "The Content-Length header is not a number.")
    length = int(raw)
    if length > MAX_BODY_BYTES:
        raise BadBody(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"The request body is over {MAX_BODY_BYTES} bytes.",
        )
    return bytes(rfile.read(length)) if length else None


def _read_chunked(rfile: Any) -> bytes | None:
    body = b""
    while True:
        line = rfile.readline(1024).split(b";", 1)[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            raise BadBody(HTTPStatus.BAD_REQUEST, "The chunked body does not parse.") from None
        if size < 0 or len(body) + size > MAX_BODY_BYTES:
            raise BadBody(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"The request body is over {MAX_BODY_BYTES} bytes.",
            )
        if size == 0:
            # Trailers, if any, end with an empty line.
            while rfile.readline(1024).strip():
                pass
            return body or None
        body += rfile.read(size)
        rfile.readline(1024)  # the CRLF after the chunk


def _request_path(raw: str) -> str:
    return unquote(urlsplit(raw).path)[:200]


def _stop(signum: int, frame: FrameType | None) -> None:
    # Once: a second signal (Ctrl-C reaches the whole group, then make run's own stop
    # follows) landing in the interpreter's exit would print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
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

    class UnknownMethod(local.LocalGatewayException):
        CODE = HTTPStatus.METHOD_NOT_ALLOWED

    turns = threading.BoundedSemaphore(IN_FLIGHT)
    gateway_init = local.LocalGateway.__init__
    handle_request = local.LocalGateway.handle_request
    send_response = local.ChaliceRequestHandler._send_http_response

    def init(self: local.LocalGateway, app_object: Any, config: Any) -> None:
        gateway_init(self, app_object, config)
        self.mcp_routes = local.RouteMatcher(list(app_object.routes))  # type: ignore[attr-defined]
        # Every method some route has: another is unknown to the service on any path.
        self.mcp_methods = {m for r in app_object.routes.values() for m in r}  # type: ignore[attr-defined]

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
            if method not in self.mcp_methods:  # type: ignore[attr-defined]
                # No route has the path: nothing to name in `Allow`.
                body = _fault_body(HTTPStatus.METHOD_NOT_ALLOWED, NO_METHOD)
                raise UnknownMethod({}, body) from None
            # API Gateway's own answer here is a 403 that echoes the Authorization
            # header; locally an unknown route is a plain 404.
            raise RouteNotFound({}) from None
        with turns:
            response: dict[str, Any] = handle_request(self, method, path, headers, body)
        line = log_line(method, _request_path(path), response["statusCode"], body, response["body"])
        if line is not None:
            emit(line)
        return response

    def accepted_types(self: local.ChaliceRequestHandler) -> tuple[str, ...]:
        gateway = self.local_gateway
        try:
            matched = gateway.mcp_routes.match_route(self.path)  # type: ignore[attr-defined]
            entry = gateway._app_object.routes[matched.route][self.command]
        except (ValueError, KeyError):
            return ("application/json",)
        return tuple(entry.content_types)

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
            sent_type = self.headers.get("content-type")
            accepted = accepted_types(self) if code == HTTPStatus.UNSUPPORTED_MEDIA_TYPE else ()
            body = error_body(code, self.command, _request_path(self.path), sent_type, accepted)
            headers = {
                name: value
                for name, value in headers.items()
                if name.lower() not in ("content-type", "content-length", "x-amzn-errortype")
            }
            headers["Content-Type"] = "application/json"
        if self.command == "HEAD":
            # Headers only: a body after a HEAD answer is read as the next answer.
            encoded = body.encode() if isinstance(body, str) else body or b""
            headers = {n: v for n, v in headers.items() if n.lower() != "content-length"}
            self.send_response(code)
            self.send_header("Content-Length", str(len(encoded)))
            self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
            self._send_headers(headers)
            return
        send_response(self, code, headers, body)

    def refuse(self: local.ChaliceRequestHandler, status: HTTPStatus, message: str) -> None:
        self.close_connection = True
        send(self, status, {"Connection": "close"}, _fault_body(status, message))

    def generic_handle(self: local.ChaliceRequestHandler) -> None:
        try:
            body = read_body(self.headers, self.rfile)
        except BadBody as bad:
            # What is left of the body cannot be told from the next request: close.
            refuse(self, bad.status, bad.message)
            return
        try:
            response = self.local_gateway.handle_request(
                method=self.command, path=self.path, headers=dict(self.headers), body=body
            )
            headers = response["headers"].copy()
            headers.update(response["multiValueHeaders"])
            response = self._handle_binary(response)
            send(self, response["statusCode"], headers, response["body"])
        except local.LocalGatewayException as error:
            send(self, error.CODE, error.headers, error.body)
        except (ConnectionError, TimeoutError):
            raise
        except Exception:
            # A fault here must answer, not drop the connection mid-request.
            logging.getLogger(__name__).exception("local gateway fault")
            refuse(
                self,
                HTTPStatus.INTERNAL_SERVER_ERROR,
                "The local gateway failed on this request; see the server's log.",
            )

    def any_method(self: local.ChaliceRequestHandler, name: str) -> Callable[[], None]:
        # http.server looks up `do_<METHOD>` and answers an HTML 501 if there is none:
        # every method goes to the gateway instead, which answers the 405.
        if name.startswith("do_"):
            return lambda: generic_handle(self)
        raise AttributeError(name)

    def send_error(
        self: local.ChaliceRequestHandler,
        code: int,
        message: str | None = None,
        explain: str | None = None,
    ) -> None:
        # http.server's own refusals (a request line it cannot parse, one too long) in
        # the service's shape; logged as it logs them (control characters escaped).
        self.log_error("code %d, message %s", code, message)
        status = HTTPStatus(code)
        refuse(self, status, message or status.phrase)

    local.LocalGateway.__init__ = init  # type: ignore[method-assign]
    local.LocalGateway.handle_request = handle  # type: ignore[method-assign]
    local.ChaliceRequestHandler._send_http_response = send  # type: ignore[method-assign]
    for verb in ("GET", "PUT", "POST", "HEAD", "DELETE", "PATCH", "OPTIONS"):
        setattr(local.ChaliceRequestHandler, f"do_{verb}", generic_handle)
    local.ChaliceRequestHandler.__getattr__ = any_method
    local.ChaliceRequestHandler.send_error = send_error

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
