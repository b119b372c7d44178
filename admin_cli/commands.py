"""`mcp-quota session|grant|audit ...`: the admin API, one function per command.

Each command returns an `Output`: the service's JSON (what `--json` prints) and the text a
human reads. Printing is left to `admin_cli.main`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from admin_cli import render
from admin_cli.api_client import AdminClient, quote_segment
from admin_cli.errors import CliError, ExitCode
from admin_cli.render import Output
from chalicelib.check.requests import check_printable, reason_field, session_id_param
from chalicelib.clock import iso_utc, parse_iso_utc
from chalicelib.errors import InvalidRequest

MAX_AUDIT_PAGES = 1000


def check_session_id(session_id: str) -> str:
    """A session id as the service accepts it (the service's own rule).

    Raises:
        CliError: the id is empty, too long, or not visible ASCII (usage).
    """
    try:
        return session_id_param(session_id)
    except InvalidRequest as exc:
        raise CliError(f"{exc.message} Got {session_id!r}.", ExitCode.USAGE) from exc


def check_reason(reason: str) -> str:
    """A reason for the audit trail, by the service's rule: not blank, not too long, no
    control characters; returned stripped.

    Raises:
        CliError: the reason breaks the rule (usage).
    """
    try:
        return check_printable(reason_field({"reason": reason}), "reason")
    except InvalidRequest as exc:
        raise CliError(f"--reason is not valid: {exc.message}", ExitCode.USAGE) from exc


def check_timestamp(text: str, option: str) -> str:
    """An ISO-8601 timestamp with a time zone, normalised to UTC `...Z`.

    Raises:
        CliError: the text is not such a timestamp (usage).
    """
    try:
        return iso_utc(parse_iso_utc(text))
    except ValueError as exc:
        raise CliError(
            f"{option} must be an ISO-8601 time with a time zone, such as "
            f"2026-12-01T09:00:00Z; got {text!r}.",
            ExitCode.USAGE,
        ) from exc


def _object(data: Any, key: str) -> Mapping[str, Any]:
    """`data[key]` as an object.

    Raises:
        CliError: the answer does not hold that object (the service broke the contract).
    """
    value = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(value, Mapping):
        raise CliError(f"The service's answer has no {key!r} object.", ExitCode.UNEXPECTED)
    return value


def _list(data: Any, key: str) -> list[Mapping[str, Any]]:
    """`data[key]` as a list of objects.

    Raises:
        CliError: the answer does not hold that list (the service broke the contract).
    """
    value = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise CliError(f"The service's answer has no {key!r} list.", ExitCode.UNEXPECTED)
    return value


def _session_path(session_id: str, action: str = "") -> str:
    path = f"/v1/sessions/{quote_segment(check_session_id(session_id))}"
    return f"{path}/{action}" if action else path


def _raise_body(category: str, reason: str, limit: int | None, add: int | None) -> dict[str, Any]:
    """The body of a raise at any scope.

    Raises:
        CliError: neither or both of limit/add given (usage), or a bad reason.
    """
    if (limit is None) == (add is None):
        raise CliError("Give exactly one of --limit and --add.", ExitCode.USAGE)
    amount = {"limit": limit} if limit is not None else {"add": add}
    return {"category": category, **amount, "reason": check_reason(reason)}


def session_show(client: AdminClient, session_id: str) -> Output:
    """`session show`: counters, limits, state and last calls.

    Raises:
        CliError: the request failed (404 when the session was never seen).
    """
    data = client.call("GET", _session_path(session_id))
    if not isinstance(data, Mapping) or "session_id" not in data:
        raise CliError("The service's answer is not a session.", ExitCode.UNEXPECTED)
    return Output(data, render.session_view(data))


def session_raise(
    client: AdminClient,
    session_id: str,
    category: str,
    reason: str,
    limit: int | None = None,
    add: int | None = None,
) -> Output:
    """`session raise`: set a category's limit, or add to it, for one session.

    Raises:
        CliError: neither or both of limit/add given (usage), or the request failed
            (409 when it would lower the limit, 400 above the policy's maximum).
    """
    body = _raise_body(category, reason, limit, add)
    try:
        data = client.call("POST", _session_path(session_id, "raise"), body)
    except CliError as exc:
        if exc.exit_code is not ExitCode.CONFLICT:
            raise
        # The service's words are for every client; a CLI user wants the command.
        command = shlex.join(
            ["mcp-quota", "session", "lower", session_id, "--category", category, "--reason"]
        )
        raise CliError(
            f'{exc.message} To bring the limit back to the base: {command} "..."',
            exc.exit_code,
        ) from exc
    session = _object(data, "session")
    headline = (
        f"Raised {render.cell(data.get('category', category))} for session {session_id}: "
        f"limit {render.change(data.get('before'), data.get('after'))}."
    )
    return Output(data, f"{headline}\n\n{render.session_view(session)}")


_DONE = {"suspend": "suspended", "resume": "resumed", "reset": "reset (counters zeroed)"}


def session_action(client: AdminClient, session_id: str, action: str, reason: str) -> Output:
    """`session suspend|resume|reset`.

    Raises:
        CliError: the action is unknown (usage) or the request failed.
    """
    if action not in _DONE:
        raise CliError(f"Unknown session action {action!r}.", ExitCode.USAGE)
    body = {"reason": check_reason(reason)}
    data = client.call("POST", _session_path(session_id, action), body)
    session = _object(data, "session")
    headline = f"Session {session_id} {_DONE[action]}."
    return Output(data, f"{headline}\n\n{render.session_view(session)}")


def session_lower(client: AdminClient, session_id: str, category: str, reason: str) -> Output:
    """`session lower`: bring a raised limit back down to the base.

    Raises:
        CliError: the request failed.
    """
    body = {"category": category, "reason": check_reason(reason)}
    data = client.call("POST", _session_path(session_id, "lower"), body)
    session = _object(data, "session")
    headline = (
        f"Lowered {render.cell(category)} for session {session_id}: "
        f"limit {render.change(data.get('before'), data.get('after'))}."
    )
    return Output(data, f"{headline}\n\n{render.session_view(session)}")


def session_list(client: AdminClient, state: str | None, since: str | None) -> Output:
    """`session list`: the sessions blocked or suspended (default: the last 24 h).

    Raises:
        CliError: the request failed.
    """
    params = {k: v for k, v in (("state", state), ("since", since)) if v is not None}
    query = "&".join(f"{k}={quote_segment(v)}" for k, v in params.items())
    data = client.call("GET", "/v1/sessions" + (f"?{query}" if query else ""))
    sessions = _list(data, "sessions")
    if not sessions:
        return Output(data, "No session was blocked or suspended in that time.")
    headers = ("SESSION", "STATE", "PRINCIPAL", "SERVER", "CLIENT", "LAST CALL")
    rows = [
        (
            s.get("session_id"),
            s.get("listing_state") or s.get("state"),
            s.get("principal"),
            s.get("server"),
            render.client_name(s.get("client")),
            s.get("last_call_at") or s.get("last_seen_at"),
        )
        for s in sessions
    ]
    return Output(data, render.table(headers, rows))


def _principal_path(principal: str, action: str = "") -> str:
    path = f"/v1/principals/{quote_segment(check_session_id(principal))}"
    return f"{path}/{action}" if action else path


def principal_show(client: AdminClient, principal: str) -> Output:
    """`principal show`: a principal's windowed counters, limits and state.

    Raises:
        CliError: the request failed.
    """
    data = client.call("GET", _principal_path(principal))
    if not isinstance(data, Mapping) or "categories" not in data:
        raise CliError("The service's answer is not a principal.", ExitCode.UNEXPECTED)
    return Output(data, render.budget_view(data))


def principal_raise(
    client: AdminClient,
    principal: str,
    category: str,
    reason: str,
    limit: int | None = None,
    add: int | None = None,
) -> Output:
    """`principal raise`: lift a category's principal budget.

    Raises:
        CliError: neither or both of limit/add given (usage), or the request failed.
    """
    body = _raise_body(category, reason, limit, add)
    data = client.call("POST", _principal_path(principal, "raise"), body)
    budget = _object(data, "principal")
    headline = (
        f"Raised {render.cell(category)} for principal {render.cell(principal)}: "
        f"limit {render.change(data.get('before'), data.get('after'))}."
    )
    return Output(data, f"{headline}\n\n{render.budget_view(budget)}")


def principal_action(client: AdminClient, principal: str, action: str, reason: str) -> Output:
    """`principal suspend|resume|reset`.

    Raises:
        CliError: the action is unknown (usage) or the request failed.
    """
    if action not in _DONE:
        raise CliError(f"Unknown principal action {action!r}.", ExitCode.USAGE)
    data = client.call("POST", _principal_path(principal, action), {"reason": check_reason(reason)})
    budget = _object(data, "principal")
    headline = f"Principal {render.cell(principal)} {_DONE[action]}."
    return Output(data, f"{headline}\n\n{render.budget_view(budget)}")


def tenant_show(client: AdminClient) -> Output:
    """`tenant show`: the tenant's ceiling over everything its servers do.

    Raises:
        CliError: the request failed.
    """
    data = client.call("GET", "/v1/tenant")
    if not isinstance(data, Mapping) or "categories" not in data:
        raise CliError("The service's answer is not a tenant budget.", ExitCode.UNEXPECTED)
    return Output(data, render.budget_view(data))


def token_create_api(
    client: AdminClient, role: str, name: str, principals: tuple[str, ...]
) -> Output:
    """`token create --api`: a token of the calling admin's tenant, through the admin API.

    Raises:
        CliError: the request failed (400 names the bad field).
    """
    body: dict[str, Any] = {"role": role, "name": name}
    if principals:
        body["principals"] = list(principals)
    data = client.call("POST", "/v1/tokens", body)
    if not isinstance(data, Mapping) or not isinstance(data.get("token"), str):
        raise CliError("The service's answer holds no token.", ExitCode.UNEXPECTED)
    pairs = [
        ("Token id", data.get("token_id")),
        ("Tenant", data.get("tenant")),
        ("Principals", ", ".join(map(str, data.get("principals") or [])) or "(its own)"),
        ("Token", data.get("token")),
    ]
    text = "\n".join(
        [
            f"Created {render.cell(data.get('role'))} token.",
            "",
            render.fields(pairs),
            "",
            "Store the token now: it is shown only this once, and only its hash is kept.",
        ]
    )
    return Output(data, text)


def token_revoke_api(client: AdminClient, token_id: str) -> Output:
    """`token revoke --api`.

    Raises:
        CliError: the request failed (404 for another tenant's or an unknown token).
    """
    data = client.call("DELETE", f"/v1/tokens/{quote_segment(token_id)}")
    token = _object(data, "token") if isinstance(data, Mapping) and "token" in data else data
    when = token.get("revoked_at") if isinstance(token, Mapping) else None
    return Output(data, f"Token {render.cell(token_id)} revoked at {render.cell(when)}.")


def token_list_api(client: AdminClient) -> Output:
    """`token list --api`: the calling admin's tenant's tokens, never their secrets."""
    data = client.call("GET", "/v1/tokens")
    tokens = _list(data, "tokens")
    if not tokens:
        return Output(data, "No tokens.")
    headers = ("TOKEN ID", "ROLE", "NAME", "PRINCIPALS", "CREATED", "REVOKED")
    rows = [
        (
            t.get("token_id"),
            t.get("role"),
            t.get("name"),
            ", ".join(map(str, t.get("principals") or [])),
            t.get("created_at"),
            t.get("revoked_at"),
        )
        for t in tokens
    ]
    return Output(data, render.table(headers, rows))


def grant_add(
    client: AdminClient,
    principal: str,
    category: str,
    limit: int,
    starts_at: str,
    ends_at: str,
    reason: str,
) -> Output:
    """`grant add`: a raise planned ahead for every session of one principal.

    Raises:
        CliError: a time is malformed or the window is empty (usage), or the request failed.
    """
    starts = check_timestamp(starts_at, "--starts-at")
    ends = check_timestamp(ends_at, "--ends-at")
    if parse_iso_utc(ends) <= parse_iso_utc(starts):
        raise CliError("--ends-at must be later than --starts-at.", ExitCode.USAGE)
    body = {
        "principal": principal,
        "category": category,
        "limit": limit,
        "starts_at": starts,
        "ends_at": ends,
        "reason": check_reason(reason),
    }
    data = client.call("POST", "/v1/grants", body)
    grant = _object(data, "grant")
    return Output(data, f"Grant created.\n\n{render.grant_view(grant)}")


def grant_list(client: AdminClient) -> Output:
    """`grant list`: this tenant's grants.

    Raises:
        CliError: the request failed.
    """
    data = client.call("GET", "/v1/grants")
    return Output(data, render.grants(_list(data, "grants")))


def grant_rm(client: AdminClient, grant_id: str) -> Output:
    """`grant rm`: delete one grant.

    Raises:
        CliError: the id is blank (usage) or the request failed (404 when unknown).
    """
    if not grant_id.strip():
        raise CliError("The grant id must not be blank.", ExitCode.USAGE)
    data = client.call("DELETE", f"/v1/grants/{quote_segment(grant_id)}")
    grant = _object(data, "grant")
    return Output(data, f"Grant removed.\n\n{render.grant_view(grant)}")


def shadow(client: AdminClient, since: str | None = None) -> Output:
    """`shadow`: the calls shadow mode let run that an enforcing policy would have
    refused, grouped by server, principal and tool (`GET /v1/shadow`).

    Raises:
        CliError: an option is malformed, or the request failed.
    """
    query: dict[str, str | int | None] = {
        "since": None if since is None else check_timestamp(since, "--since"),
    }
    data = client.call("GET", "/v1/shadow", query=query)
    groups = _list(data, "groups")
    note = None
    if data.get("truncated"):
        note = "Only the first 10,000 events were read: give a later --since."
    if not groups:
        return Output(data, "No call would have been refused.", note)
    headers = (
        "SERVER",
        "PRINCIPAL",
        "TOOL",
        "WOULD REFUSE",
        "SESSIONS",
        "CATEGORY",
        "SCOPE",
        "LAST",
    )
    rows = [
        (
            g["server"],
            g["principal"],
            g["tool"],
            g["refusals"],
            g["sessions"],
            ", ".join(g["categories"]),
            ", ".join(g["scopes"]),
            g["last"],
        )
        for g in groups
    ]
    return Output(data, render.table(headers, rows), note)


def audit(
    client: AdminClient,
    session_id: str | None = None,
    since: str | None = None,
    limit: int | None = None,
    next_token: str | None = None,
    all_pages: bool = False,
    type_: str | None = None,
    principal: str | None = None,
    server: str | None = None,
    until: str | None = None,
) -> Output:
    """`audit`: one page of audit events (the whole tenant's, newest first, or one
    session's, oldest first), or every page with `all_pages`.

    Raises:
        CliError: an option is malformed (usage), the request failed, or the service
            repeats a page token (it would never end).
    """
    query: dict[str, str | int | None] = {
        "session_id": None if session_id is None else check_session_id(session_id),
        "since": None if since is None else check_timestamp(since, "--since"),
        "limit": limit,
        "next": next_token,
        "type": type_,
        "principal": principal,
        "server": server,
        "until": None if until is None else check_timestamp(until, "--until"),
    }
    events: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    for _ in range(MAX_AUDIT_PAGES):
        data = client.call("GET", "/v1/audit", query=query)
        events.extend(_list(data, "events"))
        following = data.get("next")
        if not all_pages or not following:
            break
        if following in seen:
            raise CliError("The service repeated an audit page token.", ExitCode.UNEXPECTED)
        seen.add(str(following))
        query["next"] = str(following)
    else:
        raise CliError(f"Stopped after {MAX_AUDIT_PAGES} audit pages.", ExitCode.UNEXPECTED)
    if all_pages:
        data = {"events": events, "next": None}
    note = None
    if data.get("next"):
        following = render.cell(data["next"])
        note = f"More events: add --all-pages, or --next {following} for the next page."
    return Output(data, render.audit_events(events), note)
