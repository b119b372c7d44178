"""The admin routes that change one session or principal (raise, lower, suspend, resume,
reset): an operator's POST whose body is read first, then the key in its path, then the
change made and its result answered. One shape; each route keeps its own URL and name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, operator_and_body
from chalicelib.api.deferred import admin_requests
from chalicelib.api.responses import handled, json_response

if TYPE_CHECKING:
    from chalicelib import wiring
    from chalicelib.api.schemas import Body
    from chalicelib.auth.tokens import Identity

S = TypeVar("S")  # the admin service the routes call
K = TypeVar("K")  # the key their path names

# A change's body, read: a raise, a lowering, or a reason (each method takes its own).
Parse = Callable[[Mapping[str, Any], "wiring.Container"], Any]


def raise_request(body: Mapping[str, Any], container: wiring.Container) -> Any:
    """Raises: InvalidRequest."""
    return admin_requests.parse_raise(body, container.policy)


def lower_request(body: Mapping[str, Any], container: wiring.Container) -> Any:
    """Raises: InvalidRequest."""
    return admin_requests.parse_lower(body, container.policy)


def reason(body: Mapping[str, Any], container: wiring.Container) -> Any:
    """Raises: InvalidRequest."""
    return admin_requests.parse_reason(body)


@dataclass(frozen=True)
class Change(Generic[S, K]):
    """One route: what it does (its docstring), how its body is read, and the service's
    method that makes the change."""

    doc: str
    parse: Parse
    method: Callable[[S], Callable[[Identity, K, Any], Body]]


def operator_routes(
    blueprint: Blueprint,
    prefix: str,
    noun: str,
    path_key: Callable[[Identity, str], K],
    service: Callable[[wiring.Container], S],
    changes: Mapping[str, Change[S, K]],
) -> None:
    """Register `POST {prefix}/{action}`, view `{action}_{noun}`, for each change."""
    for action, change in changes.items():
        view = _view(blueprint, path_key, service, change)
        view.__name__ = view.__qualname__ = f"{action}_{noun}"
        view.__doc__ = change.doc
        blueprint.route(f"{prefix}/{action}", methods=["POST"], authorizer=bearer)(handled(view))


def _view(
    blueprint: Blueprint,
    path_key: Callable[[Identity, str], K],
    service: Callable[[wiring.Container], S],
    change: Change[S, K],
) -> Callable[..., Response]:
    def view(**path: str) -> Response:
        who, body = operator_and_body(blueprint.current_request)
        container = deps()
        parsed = change.parse(body, container)
        (raw,) = path.values()
        method = change.method(service(container))
        return json_response(method(who, path_key(who, raw), parsed))

    return view
